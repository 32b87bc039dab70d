# kvcpt build. `make` builds ./kvcpt; `make test` runs the CPU suite;
# `make test-gpu` runs the GPU suite (skips when no GPU is visible);
# `make setup` installs the Debian and pinned Python dependencies (idempotent).
#
# Sources are found by directory, one concern per file; every .c/.cu under
# the component directories goes into build/libkvcpt.a.

.DEFAULT_GOAL := all

CC      ?= gcc
OPT     ?= -O2
# -fno-trapping-math: kvcpt never reads floating-point exception flags, and
# with GCC's default (trapping) a select between two computed values stays a
# branch, so the softmax loops (exp_softmax) ran scalar on AVX2. Values do
# not change: only exception flags, which nothing reads, may differ.
CFLAGS  := -std=c11 $(OPT) -g -Wall -Wextra -Wno-unused-parameter -fno-trapping-math -fopenmp -D_GNU_SOURCE -I.
LDLIBS  :=

# --- CPU libraries (Debian packages, see docs/setup.md) ---
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
BLAS_LIBS   := $(or $(shell pkg-config --libs openblas 2>/dev/null),-lopenblas)
CFLAGS  += $(BLAS_CFLAGS)
LDLIBS  += $(BLAS_LIBS) -ljansson -lzstd -lpcre2-8 -lcrypto -lm

# --- optional MPI (multi-rank CPU training; bootstraps NCCL): used whenever
# mpicc is found (NO_MPI=1 disables). The flags come from the wrapper, so
# the compiler stays gcc and nvcc never sees MPI.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifeq ($(NO_MPI),1)
MPICC :=
endif
ifneq ($(MPICC),)
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show | cut -d' ' -f2- | tr ' ' '\n' | grep '^-I' | tr '\n' ' ')
CFLAGS  += -DKVCPT_MPI $(MPI_CFLAGS)
LDLIBS  += $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -show | cut -d' ' -f2- | tr ' ' '\n' | grep '^-[lLW]' | tr '\n' ' ')
endif

# the CUDA emulator's tests (below) build against the CPU flags without CUDA's
BASE_CFLAGS := $(CFLAGS)
BASE_LDLIBS := $(LDLIBS)

# --- optional CUDA backend: built whenever nvcc is found (NO_CUDA=1 disables) ---
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(NO_CUDA),1)
NVCC :=
endif
ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90
NVCCFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -I. -Xcompiler -fopenmp,-Wall --expt-relaxed-constexpr
comma      := ,
CUDA_SM    := $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(CUDA_ARCH))))
CFLAGS     += -DKVCPT_CUDA -DKVCPT_CUDA_ARCH='"$(CUDA_SM)"' -I$(CUDA_HOME)/include
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lstdc++
CU_SRC     := $(wildcard kernels/*.cu)
# NCCL (GPU collectives) needs MPI for its bootstrap; found beside CUDA or
# in NCCL_HOME (e.g. a Python environment's nvidia/nccl)
NCCL_HOME  ?= $(firstword $(foreach d,$(CUDA_HOME) /usr,$(if $(wildcard $(d)/include/nccl.h),$(d))))
ifneq ($(and $(MPICC),$(NCCL_HOME),$(if $(filter 1,$(NO_NCCL)),,yes)),)
CFLAGS     += -DKVCPT_NCCL -I$(NCCL_HOME)/include
NCCL_FOUND := yes
LDLIBS     += -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib64 -lnccl
endif
endif

# what was found, said once per top-level make (not for clean or setup)
ifeq ($(MAKELEVEL),0)
ifeq ($(filter clean setup,$(MAKECMDGOALS)),)
$(info kvcpt build: MPI $(if $(MPICC),yes ($(MPICC)),no); CUDA $(if $(NVCC),yes ($(NVCC)),no); \
  NCCL $(if $(filter -DKVCPT_NCCL,$(CFLAGS)),yes ($(NCCL_HOME)/include/nccl.h),no); \
  emulated NCCL (build/emu) $(if $(MPICC),yes (tests/cuda_emu/emu_nccl.cc over MPI),no (needs MPI)))
endif
endif

DIRS    := common model kernels data optim checkpoints parallel train eval
# An optional backend's C files register its tables (common/backend.h,
# eval/decode_device.h, parallel/comm_backend.h, ...) and are linked only
# where it is built; its stubs, which register none, stand in for them
# elsewhere, so the code that uses a backend asks its table at run time
# instead of the preprocessor at build time.
CUDA_C      := kernels/cuda_backend.c eval/engine_cuda.c train/train_engine_cuda.c train/device_optim.c \
               parallel/fsdp_cuda.c
CUDA_STUB_C := common/backend_cuda_stub.c eval/engine_cuda_stub.c train/train_engine_cuda_stub.c
MPI_C       := parallel/comm_mpi.c
MPI_STUB_C  := parallel/comm_mpi_stub.c
NCCL_C      := parallel/comm_nccl.c parallel/nccl_watchdog.c
NCCL_STUB_C := parallel/comm_nccl_stub.c
ALL_C       := $(foreach d,$(DIRS),$(wildcard $(d)/*.c))
CPU_C       := $(filter-out $(CUDA_C) $(CUDA_STUB_C) $(MPI_C) $(MPI_STUB_C) $(NCCL_C) $(NCCL_STUB_C),$(ALL_C)) \
               $(if $(MPICC),$(MPI_C),$(MPI_STUB_C))
C_SRC       := $(CPU_C) $(if $(NVCC),$(CUDA_C),$(CUDA_STUB_C)) $(if $(NCCL_FOUND),$(NCCL_C),$(NCCL_STUB_C))
OBJ     := $(C_SRC:%.c=build/%.o) $(CU_SRC:%.cu=build/%.cu.o)
HDR     := $(foreach d,$(DIRS),$(wildcard $(d)/*.h $(d)/*.cuh))

TEST_SRC  := $(wildcard tests/test_*.c)
TEST_BIN  := $(TEST_SRC:tests/%.c=build/tests/%)
TOOL_SRC  := $(wildcard tests/tools/*.c)
TOOL_BIN  := $(TOOL_SRC:tests/tools/%.c=build/tests/tools/%)
GPU_SRC   := $(wildcard tests/gpu/test_*.c)
GPU_BIN   := $(GPU_SRC:tests/gpu/%.c=build/tests/gpu/%)

# --- the CUDA kernels on the CPU (tests/cuda_emu): every .cu file but
# matmul.cu (cuBLASLt is not emulated: tests/cuda_emu/matmul_emu.c stands
# in for it with the CPU matmuls) is rewritten by cu2cc.sh and compiled
# by g++ against a fiber-based stand-in for the CUDA runtime; the GPU parity
# tests, built against it, become CPU tests (build/tests/test_cuda_emu_*).
# They need no nvcc and no GPU, so `make test` runs them everywhere.
CXX          ?= g++
EMU_CU       := $(filter-out kernels/matmul.cu,$(wildcard kernels/*.cu))
EMU_C        := $(CPU_C) $(CUDA_C) $(if $(MPICC),$(NCCL_C),$(NCCL_STUB_C)) tests/cuda_emu/matmul_emu.c
EMU_FLAGS    := -DKVCPT_CUDA -DKVCPT_CUDA_EMU -Itests/cuda_emu/include
# NCCL in the emulator: tests/cuda_emu/emu_nccl.cc over MPI, so the nccl
# backend (parallel/comm_nccl.c) is built and runs under mpirun wherever MPI is
EMU_NCCL_OBJ :=
ifneq ($(MPICC),)
EMU_FLAGS    += -DKVCPT_NCCL
EMU_NCCL_OBJ := emu_nccl.o
endif
EMU_CFLAGS   := $(BASE_CFLAGS) $(EMU_FLAGS)
# device code contracts a*b+c into FMA as nvcc does by default (-fmad=true):
# g++ with contraction on and, where the CPU has them, FMA instructions.
# The .cu files compile once for host and device here, and the kernels are
# what is emulated, so they see nvcc's device-pass macro for sm_90 (shared
# headers such as optim/adamw_math.h pick their explicitly rounded path by
# it) and, as nvcc does, get cuda_runtime.h (the intrinsics) before any line.
EMU_FMA      := $(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
EMU_CXXFLAGS := -std=c++17 $(OPT) -g -ffp-contract=fast $(EMU_FMA) -D__CUDA_ARCH__=900 -include cuda_runtime.h -fopenmp -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
                -D_GNU_SOURCE -I. \
                -iquote kernels $(EMU_FLAGS)
EMU_OBJ      := $(EMU_C:%.c=build/emu/%.o) $(EMU_CU:%.cu=build/emu/%.cu.o) build/emu/emu_runtime.o \
                $(EMU_NCCL_OBJ:%=build/emu/%) build/emu/emu_mma.o
EMU_HDR      := $(wildcard tests/cuda_emu/include/*.h tests/cuda_emu/include/*/*/*.cuh)
EMU_TESTS    := ops_cuda adamw_cuda shard_ops_cuda attention_cuda attention_mma model_cuda decode_cuda attention_decode_cuda mma mem_plan_cuda
EMU_BIN      := $(EMU_TESTS:%=build/tests/test_cuda_emu_%)
# the NCCL tests, on the plain emulator only (tests/test_cuda_emu_nccl.sh
# runs them under mpirun; run.sh runs them once as a single rank)
ifneq ($(MPICC),)
EMU_BIN      += build/tests/test_cuda_emu_comm_nccl build/tests/test_cuda_emu_nccl_collectives
endif

build/emu/%.o: %.c $(HDR) $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) -c $< -o $@

build/emu/%.cu.cc: %.cu tests/cuda_emu/cu2cc.sh
	@mkdir -p $(dir $@)
	bash tests/cuda_emu/cu2cc.sh $< $@

# kept, so make does not delete them after the test summary line
.SECONDARY: $(EMU_CU:%.cu=build/emu/%.cu.cc) build/emu/tests/cuda_emu/emu_checks.cu.cc build/emu/tests/gpu/mma_gemm.cu.cc

# kernels' own headers, rewritten as the .cu files are (static shared memory
# is counted); the .cu.cc files beside them include these before kernels/'s
EMU_CUH      := $(patsubst %,build/emu/%,$(wildcard kernels/*.cuh))
$(EMU_CUH): build/emu/%.cuh: %.cuh tests/cuda_emu/cu2cc.sh
	@mkdir -p $(dir $@)
	bash tests/cuda_emu/cu2cc.sh $< $@

build/emu/%.cu.o: build/emu/%.cu.cc $(HDR) $(EMU_HDR) $(EMU_CUH)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@

build/emu/emu_runtime.o: tests/cuda_emu/emu_runtime.cc tests/cuda_emu/emu_mma.h $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@

# the warp-level matrix instructions (kernels/mma.cuh): layouts and arithmetic
build/emu/emu_mma.o: tests/cuda_emu/emu_mma.cc tests/cuda_emu/emu_mma.h $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) -c $< -o $@

# MPI's headers for the emulated NCCL only (the kernels never see them)
build/emu/emu_nccl.o: tests/cuda_emu/emu_nccl.cc $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_CXXFLAGS) $(MPI_CFLAGS) -c $< -o $@

build/emu/libkvcpt_emu.a: $(EMU_OBJ)
	rm -f $@ && ar rcs $@ $^

# the whole program on the emulated GPU: `kvcpt train --set device=cuda` on CI
build/emu/kvcpt: kvcpt.c build/emu/libkvcpt_emu.a
	$(CC) $(EMU_CFLAGS) $< build/emu/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

build/emu/tools/%: tests/tools/%.c build/emu/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) $< build/emu/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

# the emulator's own checks: launch limits, planted races (tests/test_cuda_emu_orders.sh)
build/emu/emu_checks: build/emu/tests/cuda_emu/emu_checks.cu.o build/emu/emu_runtime.o build/emu/emu_mma.o
	$(CXX) $(EMU_CXXFLAGS) $^ -o $@

build/tests/test_cuda_emu_%: tests/gpu/test_%.c tests/testlib.h tests/gpu/gpu_testlib.h build/emu/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) $< build/emu/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

# the tensor-core primitives' test (tests/gpu/test_mma.c) links its own
# kernel file, a GEMM written with kernels/mma.cuh, beside the library
MMA_TEST_DEP := tests/gpu/test_mma.c tests/gpu/mma_gemm.h tests/testlib.h tests/gpu/gpu_testlib.h
build/emu/tests/gpu/mma_gemm.cu.o build/emu-race/tests/gpu/mma_gemm.cu.o build/emu-asan/tests/gpu/mma_gemm.cu.o \
build/tests/gpu/mma_gemm.cu.o: tests/gpu/mma_gemm.h
build/tests/test_cuda_emu_mma: $(MMA_TEST_DEP) build/emu/tests/gpu/mma_gemm.cu.o build/emu/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) $< build/emu/tests/gpu/mma_gemm.cu.o build/emu/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

# --- the emulator's race-detecting variant (build/emu-race/): the kernels
# (the .cu.cc files above, emu_checks.cu's too) compiled with gcc's
# -fsanitize=thread instrumentation, linked without libtsan: the calls it
# adds go to tests/cuda_emu/emu_race.cc, which reports conflicting accesses
# to shared and device memory that no barrier orders (docs/cuda.md). The C
# objects and build/emu/ itself are shared with the plain variant, unchanged.
# tests/test_cuda_emu_races.sh runs these.
RACE_CXXFLAGS := $(EMU_CXXFLAGS) -DKVCPT_EMU_RACE -gdwarf-4
RACE_OBJ      := $(EMU_C:%.c=build/emu/%.o) $(EMU_CU:%.cu=build/emu-race/%.cu.o) \
                 build/emu-race/emu_runtime.o build/emu-race/emu_race.o $(EMU_NCCL_OBJ:%=build/emu/%) build/emu-race/emu_mma.o
RACE_HDR      := $(EMU_HDR) tests/cuda_emu/emu_race.h
RACE_BIN      := $(EMU_TESTS:%=build/emu-race/tests/test_cuda_emu_%) build/emu-race/emu_checks

build/emu-race/%.cu.o: build/emu/%.cu.cc $(HDR) $(RACE_HDR) $(EMU_CUH)
	@mkdir -p $(dir $@)
	$(CXX) $(RACE_CXXFLAGS) -fsanitize=thread -c $< -o $@

build/emu-race/emu_runtime.o: tests/cuda_emu/emu_runtime.cc tests/cuda_emu/emu_mma.h $(RACE_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(RACE_CXXFLAGS) -c $< -o $@

build/emu-race/emu_mma.o: tests/cuda_emu/emu_mma.cc tests/cuda_emu/emu_mma.h $(RACE_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(RACE_CXXFLAGS) -c $< -o $@

build/emu-race/emu_race.o: tests/cuda_emu/emu_race.cc $(RACE_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(RACE_CXXFLAGS) -c $< -o $@

build/emu-race/libkvcpt_emu.a: $(RACE_OBJ)
	rm -f $@ && ar rcs $@ $^

build/emu-race/emu_checks: build/emu-race/tests/cuda_emu/emu_checks.cu.o build/emu-race/emu_runtime.o \
                           build/emu-race/emu_race.o build/emu-race/emu_mma.o
	$(CXX) $(RACE_CXXFLAGS) $^ -o $@

build/emu-race/tests/test_cuda_emu_%: tests/gpu/test_%.c tests/testlib.h tests/gpu/gpu_testlib.h \
                                      build/emu-race/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) $< build/emu-race/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

build/emu-race/tests/test_cuda_emu_mma: $(MMA_TEST_DEP) build/emu-race/tests/gpu/mma_gemm.cu.o build/emu-race/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_CFLAGS) $< build/emu-race/tests/gpu/mma_gemm.cu.o build/emu-race/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@
# --- end of the race-detecting variant

# --- the emulator under AddressSanitizer and UBSan (build/emu-asan): the
# same sources as build/emu, built with KVCPT_EMU_ASAN, which makes the
# emulator allocate dynamic shared memory and cudaMalloc at exactly the
# bytes asked for, tell ASan about its fiber stack switches, and poison red
# zones between carved sub-buffers (common/redzone.h). `make sanitize-emu`
# builds it and runs the emulated GPU tests, the planted bugs, the kernels
# at Llama-3.1-8B shapes and the emulated-engine CLI tests on it (tens of
# minutes on 2 cores: docs/cuda.md); `make test` builds the two quick
# binaries and runs the planted bugs and most 8B-shape kernels
# (tests/test_cuda_emu_asan.sh).
EMU_ASAN_FLAGS    := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                     -DKVCPT_EMU_ASAN
EMU_ASAN_CFLAGS   := $(filter-out $(OPT),$(EMU_CFLAGS)) $(EMU_ASAN_FLAGS)
EMU_ASAN_CXXFLAGS := $(filter-out $(OPT),$(EMU_CXXFLAGS)) $(EMU_ASAN_FLAGS)
EMU_ASAN_OBJ      := $(EMU_C:%.c=build/emu-asan/%.o) $(EMU_CU:%.cu=build/emu-asan/%.cu.o) build/emu-asan/emu_runtime.o \
                     $(EMU_NCCL_OBJ:%=build/emu-asan/%) build/emu-asan/emu_mma.o
EMU_ASAN_BIN      := $(EMU_TESTS:%=build/emu-asan/tests/test_cuda_emu_%)
EMU_ASAN_ALL      := $(EMU_ASAN_BIN) build/emu-asan/kvcpt build/emu-asan/tools/dump_model_case \
                     build/emu-asan/emu_checks build/emu-asan/kernels_8b
ifneq ($(MPICC),)
EMU_ASAN_ALL      += build/emu-asan/tests/test_cuda_emu_comm_nccl build/emu-asan/tests/test_cuda_emu_nccl_collectives
endif

build/emu-asan/%.o: %.c $(HDR) $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CC) $(EMU_ASAN_CFLAGS) -c $< -o $@

build/emu-asan/%.cu.o: build/emu/%.cu.cc $(HDR) $(EMU_HDR) $(EMU_CUH)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_ASAN_CXXFLAGS) -c $< -o $@

build/emu-asan/emu_runtime.o: tests/cuda_emu/emu_runtime.cc tests/cuda_emu/emu_mma.h $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_ASAN_CXXFLAGS) -c $< -o $@

build/emu-asan/emu_mma.o: tests/cuda_emu/emu_mma.cc tests/cuda_emu/emu_mma.h $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_ASAN_CXXFLAGS) -c $< -o $@

build/emu-asan/emu_nccl.o: tests/cuda_emu/emu_nccl.cc $(EMU_HDR)
	@mkdir -p $(dir $@)
	$(CXX) $(EMU_ASAN_CXXFLAGS) $(MPI_CFLAGS) -c $< -o $@

build/emu-asan/libkvcpt_emu.a: $(EMU_ASAN_OBJ)
	rm -f $@ && ar rcs $@ $^

build/emu-asan/kvcpt: kvcpt.c build/emu-asan/libkvcpt_emu.a
	$(CC) $(EMU_ASAN_CFLAGS) $< build/emu-asan/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

build/emu-asan/tools/%: tests/tools/%.c build/emu-asan/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_ASAN_CFLAGS) $< build/emu-asan/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

build/emu-asan/emu_checks: build/emu-asan/tests/cuda_emu/emu_checks.cu.o build/emu-asan/emu_runtime.o build/emu-asan/emu_mma.o
	$(CXX) $(EMU_ASAN_CXXFLAGS) $^ -o $@

build/emu-asan/kernels_8b: tests/gpu/kernels_8b.c build/emu-asan/libkvcpt_emu.a
	$(CC) $(EMU_ASAN_CFLAGS) $< build/emu-asan/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

build/emu-asan/tests/test_cuda_emu_%: tests/gpu/test_%.c tests/testlib.h tests/gpu/gpu_testlib.h build/emu-asan/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_ASAN_CFLAGS) $< build/emu-asan/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

build/emu-asan/tests/test_cuda_emu_mma: $(MMA_TEST_DEP) build/emu-asan/tests/gpu/mma_gemm.cu.o build/emu-asan/libkvcpt_emu.a
	@mkdir -p $(dir $@)
	$(CC) $(EMU_ASAN_CFLAGS) $< build/emu-asan/tests/gpu/mma_gemm.cu.o build/emu-asan/libkvcpt_emu.a $(BASE_LDLIBS) -lstdc++ -o $@

sanitize-emu-bins: kvcpt $(EMU_ASAN_ALL)

sanitize-emu: sanitize-emu-bins
	bash tests/sanitize_emu.sh

.PHONY: all setup test test-gpu test-gpu-bins clean fuzz sanitize sanitize-emu sanitize-emu-bins FORCE
all: kvcpt

# The commit the binaries are built from (common/build_info.h; eval.json
# records it). build/commit.h is rewritten only when the commit changes, so
# an unchanged tree rebuilds nothing.
GIT_COMMIT := $(or $(shell git rev-parse --short=12 HEAD 2>/dev/null),unknown)$(shell git rev-parse HEAD >/dev/null 2>&1 && ! git diff --quiet HEAD -- 2>/dev/null && echo +changes)
build/commit.h: FORCE
	@mkdir -p build
	@echo '#define KVCPT_GIT_COMMIT "$(GIT_COMMIT)"' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv -f $@.tmp $@; fi
build/common/build_info.o build/emu/common/build_info.o build/emu-asan/common/build_info.o \
    build/asan/common/build_info.o: build/commit.h

build/%.o: %.c $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

build/%.cu.o: %.cu $(HDR)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

build/libkvcpt.a: $(OBJ)
	@mkdir -p build
	rm -f $@ && ar rcs $@ $^

kvcpt: kvcpt.c build/libkvcpt.a
	$(CC) $(CFLAGS) $< build/libkvcpt.a $(LDLIBS) -o $@

build/tests/%: tests/%.c tests/testlib.h build/libkvcpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< build/libkvcpt.a $(LDLIBS) -o $@

build/tests/tools/%: tests/tools/%.c build/libkvcpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< build/libkvcpt.a $(LDLIBS) -o $@

build/tests/gpu/%: tests/gpu/%.c tests/testlib.h tests/gpu/gpu_testlib.h build/libkvcpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< build/libkvcpt.a $(LDLIBS) -o $@

# with nvcc, the tensor-core test links its kernel file (tests/gpu/mma_gemm.cu)
ifneq ($(NVCC),)
build/tests/gpu/test_mma: $(MMA_TEST_DEP) build/tests/gpu/mma_gemm.cu.o build/libkvcpt.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< build/tests/gpu/mma_gemm.cu.o build/libkvcpt.a $(LDLIBS) -o $@
endif

setup:
	bash scripts/setup.sh

test: kvcpt $(TEST_BIN) $(TOOL_BIN) $(EMU_BIN) build/emu/kvcpt build/emu/tools/dump_model_case build/emu/emu_checks $(RACE_BIN) \
      build/emu-asan/emu_checks build/emu-asan/kernels_8b
	bash tests/run.sh cpu

test-gpu: test-gpu-bins
	bash tests/run.sh gpu

# the GPU suite's binaries without running them (scripts/gpu_bundle.sh)
test-gpu-bins: kvcpt $(GPU_BIN) $(TOOL_BIN)

clean:
	rm -rf build kvcpt

# `make sanitize`: the whole CPU program built with AddressSanitizer and UBSan
# (build/asan/kvcpt) runs every test script that runs the program (tests/test_*.sh that take
# their binary from KVCPT_BIN). Reports are written to build/asan/reports, not
# only to stderr, because a test that expects a refusal would take a
# sanitizer's exit status for one; any report fails the target. Not part of
# `make test` (about twice its command-line time).
SAN_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_OBJ   := $(patsubst %.c,build/asan/%.o,$(CPU_C) $(CUDA_STUB_C) $(NCCL_STUB_C))
build/asan/%.o: %.c $(HDR)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) -c $< -o $@

build/asan/kvcpt: kvcpt.c tests/sanitize/report_hook.c $(SAN_OBJ)
	$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) $^ $(BASE_LDLIBS) -o $@

sanitize: build/asan/kvcpt kvcpt $(TEST_BIN) $(TOOL_BIN) $(EMU_BIN) build/emu/kvcpt build/emu/tools/dump_model_case build/emu/emu_checks \
          build/emu-asan/emu_checks build/emu-asan/kernels_8b
	bash tests/run_sanitized.sh

# `make fuzz FUZZ_SECONDS=60`: libFuzzer (clang, with ASan + UBSan) on the
# safetensors / native model / checkpoint parsers, for a bounded time. Not
# part of `make test`; installs clang through scripts/setup.sh fuzz if absent.
FUZZ_SECONDS ?= 60
FUZZ_SRC := checkpoints/safetensors.c checkpoints/native_model.c checkpoints/ckpt.c checkpoints/mapped_file.c \
            checkpoints/gguf.c checkpoints/gguf_dequant.c \
            common/util.c common/rng.c common/json_file.c
fuzz: build/libkvcpt.a
	@command -v clang >/dev/null 2>&1 || bash scripts/setup.sh fuzz
	@mkdir -p build/fuzz/corpus
	$(CC) $(CFLAGS) tests/fuzz/make_seeds.c build/libkvcpt.a $(LDLIBS) -o build/fuzz/make_seeds
	build/fuzz/make_seeds build/fuzz/corpus && rm -rf build/fuzz/corpus/run
	clang -std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    tests/fuzz/fuzz_parsers.c $(FUZZ_SRC) -ljansson -o build/fuzz/fuzz_parsers
	build/fuzz/fuzz_parsers -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -dict=tests/fuzz/safetensors.dict \
	    -print_final_stats=1 -artifact_prefix=build/fuzz/ build/fuzz/corpus
