# kvcpt build. `make` builds ./kvcpt; `make test` runs the CPU suite;
# `make test-gpu` runs the GPU suite (skips when no GPU is visible);
# `make setup` installs the Debian and pinned Python dependencies (idempotent).
#
# Sources are found by directory, one concern per file; every .c/.cu under
# the library's directories goes into build/libkvcpt.a. cli/ (the
# command-line front, main in cli/kvcpt.c), bench/ (the `kvcpt bench`
# targets) and backends/ (the compute backends' registry entries, which
# main registers) sit above them (tests/repo/test_layers.sh checks that includes
# only go downward) and stay out of the library: kvcpt links their objects
# itself, the tests link the library alone (a test that calls a command
# names its object below).

.DEFAULT_GOAL := all
# one job per core unless the command line says otherwise (`make -j1`):
# `make test` on a fresh clone spends minutes compiling before any test runs
MAKEFLAGS += -j$(shell nproc 2>/dev/null || echo 1)

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
LDLIBS  += $(BLAS_LIBS) -ljansson -lzstd -lpcre2-8 -lutf8proc -lcrypto -lm

# --- optional MPI (multi-rank CPU training; bootstraps NCCL): used whenever
# mpicc is found (NO_MPI=1 disables). The flags come from the wrapper, so
# the compiler stays gcc and nvcc never sees MPI.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifeq ($(NO_MPI),1)
MPICC :=
endif
ifneq ($(MPICC),)
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null || $(MPICC) -show | cut -d' ' -f2- | tr ' ' '\n' | grep '^-I' | tr '\n' ' ')
CFLAGS  += $(MPI_CFLAGS)
LDLIBS  += $(shell $(MPICC) --showme:link 2>/dev/null || $(MPICC) -show | cut -d' ' -f2- | tr ' ' '\n' | grep '^-[lLW]' | tr '\n' ' ')
endif

# the CUDA emulator's tests (below) build against the CPU flags without CUDA's
BASE_CFLAGS := $(CFLAGS)
BASE_LDLIBS := $(LDLIBS)

# the component directories, lowest layer first (tests/repo/test_layers.sh);
# each compute backend's folder under backends/ is found by itself
DIRS    := common kernels data model optim checkpoints parallel train eval bench backends \
           $(patsubst %/,%,$(sort $(wildcard backends/*/))) cli
CU_ALL  := $(foreach d,$(DIRS),$(wildcard $(d)/*.cu))

# The tensor-core attention forward's query tile, 64 or 128 rows
# (kernels/attention_mma_fwd.cu; its default when empty). Objects built
# with another value are not rebuilt by themselves: remove
# build/kernels/attention_mma_fwd.cu.o and build/emu*/kernels/attention_mma_fwd.cu.o.
ATTN_FWD_ROWS ?=
ATTN_FWD_ROWS_FLAG := $(if $(ATTN_FWD_ROWS),-DKVCPT_ATTN_FWD_ROWS=$(ATTN_FWD_ROWS))

# --- optional CUDA backend: built whenever nvcc is found (NO_CUDA=1 disables) ---
NVCC ?= $(shell command -v nvcc 2>/dev/null || { test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc; })
ifeq ($(NO_CUDA),1)
NVCC :=
endif
ifneq ($(NVCC),)
CUDA_HOME  ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH  ?= -gencode arch=compute_90,code=sm_90
NVCCFLAGS  := -O3 -std=c++17 $(CUDA_ARCH) -I. -Xcompiler -fopenmp,-Wall --expt-relaxed-constexpr $(ATTN_FWD_ROWS_FLAG)
comma      := ,
CUDA_SM    := $(patsubst code=%,%,$(filter code=%,$(subst $(comma), ,$(CUDA_ARCH))))
CFLAGS     += -DKVCPT_CUDA -DKVCPT_CUDA_ARCH='"$(CUDA_SM)"' -I$(CUDA_HOME)/include
LDLIBS     += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lstdc++
CU_SRC     := $(CU_ALL)
# cuDNN's headers (attn_impl cudnn, kernels/attention_cudnn.c), found beside
# CUDA or in CUDNN_HOME (e.g. a Python environment's nvidia/cudnn); the
# library is loaded at run time when attn cudnn first runs, not linked;
# NO_CUDNN=1 leaves it out
CUDNN_HOME ?= $(firstword $(foreach d,$(CUDA_HOME) /usr,$(if $(wildcard $(d)/include/cudnn.h),$(d))))
ifneq ($(and $(CUDNN_HOME),$(if $(filter 1,$(NO_CUDNN)),,yes)),)
CFLAGS     += -DKVCPT_CUDNN -I$(CUDNN_HOME)/include
LDLIBS     += -ldl
CUDNN_FOUND := yes
endif
# NCCL (GPU collectives) needs MPI for its bootstrap; found beside CUDA or
# in NCCL_HOME (e.g. a Python environment's nvidia/nccl)
NCCL_HOME  ?= $(firstword $(foreach d,$(CUDA_HOME) /usr,$(if $(wildcard $(d)/include/nccl.h),$(d))))
ifneq ($(and $(MPICC),$(NCCL_HOME),$(if $(filter 1,$(NO_NCCL)),,yes)),)
CFLAGS     += -DKVCPT_NCCL -I$(NCCL_HOME)/include
NCCL_FOUND := yes
LDLIBS     += -L$(NCCL_HOME)/lib -L$(NCCL_HOME)/lib64 -Wl,-rpath,$(NCCL_HOME)/lib -Wl,-rpath,$(NCCL_HOME)/lib64 -lnccl
endif
endif

# Header dependencies: each compile writes a .d file beside its object
# (-MMD -MP: the headers it read, each also an empty target so a deleted
# header does not stop the build), included at the end of this file. A
# binary compiled and linked in one step writes .NAME.d beside itself (hidden,
# so globs over test binaries do not see it). An object or binary whose .d
# file is missing (built before this scheme, or by an interrupted compile)
# depends on FORCE and is rebuilt once, so no stale object survives a header
# change. Second expansion lets the prerequisite name its own target.
MAKEFLAGS    += --no-builtin-rules
.SECONDEXPANSION:
DEPFLAGS     := -MMD -MP
BIN_DEPFLAGS  = -MMD -MP -MF $(@D)/.$(@F).d
OBJ_DEPS      = $$(if $$(wildcard $$(basename $$@).d),,FORCE)
BIN_DEPS      = $$(if $$(wildcard $$(@D)/.$$(@F).d),,FORCE)

# what was found, said once per top-level make (not for clean or setup)
ifeq ($(MAKELEVEL),0)
ifeq ($(filter clean setup,$(MAKECMDGOALS)),)
$(info kvcpt build: MPI $(if $(MPICC),yes ($(MPICC)),no); CUDA $(if $(NVCC),yes ($(NVCC)),no); \
  NCCL $(if $(filter -DKVCPT_NCCL,$(CFLAGS)),yes ($(NCCL_HOME)/include/nccl.h),no); \
  cuDNN $(if $(CUDNN_FOUND),yes ($(CUDNN_HOME)/include/cudnn.h; loaded at run time),no); \
  emulated NCCL (build/emu) $(if $(MPICC),yes (tests/cuda_emu/emu_nccl.cc over MPI),no (needs MPI)))
endif
endif

MAIN_C  := cli/kvcpt.c
# An optional compute backend's C files are linked only where it is built:
# its entry in the registry (backends/NAME/, common/backend.h), which hands
# the drivers its seams, and the C sources of the layers those seams are
# (the CUDA backend's engines and benchmark halves below). Elsewhere its one
# stand-in (backends/NAME_none.c) registers the name alone, so the code that
# uses a backend asks the registry at run time instead of the preprocessor
# at build time. The emulator's builds always take the CUDA files, the
# sanitizer's (no CUDA) never.
CUDA_C      := model/decoder_cuda.c eval/engine_cuda.c train/train_engine_cuda.c train/device_optim.c \
               parallel/fsdp_cuda.c parallel/comm_device.c $(wildcard bench/*_cuda.c) $(wildcard backends/cuda/*.c)
CUDA_STUB_C := backends/cuda_none.c
# The collectives' optional backends (parallel/comm_backend.h) work the same
# way, each with its stub.
MPI_C       := parallel/comm_mpi.c
MPI_STUB_C  := parallel/comm_mpi_stub.c
NCCL_C      := parallel/comm_nccl.c parallel/nccl_watchdog.c
NCCL_STUB_C := parallel/comm_nccl_stub.c
ALL_C       := $(filter-out $(MAIN_C),$(foreach d,$(DIRS),$(wildcard $(d)/*.c)))
CPU_C       := $(filter-out $(CUDA_C) $(CUDA_STUB_C) $(MPI_C) $(MPI_STUB_C) $(NCCL_C) $(NCCL_STUB_C),$(ALL_C)) \
               $(if $(MPICC),$(MPI_C),$(MPI_STUB_C))
C_SRC       := $(CPU_C) $(if $(NVCC),$(CUDA_C),$(CUDA_STUB_C)) $(if $(NCCL_FOUND),$(NCCL_C),$(NCCL_STUB_C))
OBJ     := $(C_SRC:%.c=build/%.o) $(CU_SRC:%.cu=build/%.cu.o)
# the program's objects (cli/, bench/, backends/) and the library's (the rest)
PROG_DIRS := cli bench backends
PROG_OBJ  := $(filter $(PROG_DIRS:%=build/%/%),$(OBJ))
LIB_OBJ   := $(filter-out $(PROG_OBJ),$(OBJ))

# the C tests, grouped in tests/ by the source folder each checks, built flat
# as build/tests/NAME (tests/gpu/ holds the GPU suite)
TEST_SRC  := $(filter-out tests/gpu/%,$(wildcard tests/*/test_*.c))
TEST_BIN  := $(addprefix build/tests/,$(basename $(notdir $(TEST_SRC))))
TOOL_SRC  := $(wildcard tests/tools/*.c)
TOOL_BIN  := $(TOOL_SRC:tests/tools/%.c=build/tests/tools/%)
GPU_SRC   := $(wildcard tests/gpu/test_*.c)
GPU_BIN   := $(GPU_SRC:tests/gpu/%.c=build/tests/gpu/%)
# the tools the GPU suite runs (tests/gpu/test_*.sh name them), and only
# those: scripts/gpu_bundle.sh builds and carries what the suite runs
GPU_TOOL_BIN := $(sort $(foreach s,$(wildcard tests/gpu/test_*.sh),$(shell grep -o 'build/tests/tools/[A-Za-z0-9_]*' $(s))))

# --- the CUDA kernels on the CPU (tests/cuda_emu): every .cu file but
# matmul.cu (cuBLASLt is not emulated: tests/cuda_emu/matmul_emu.c stands
# in for it with the CPU matmuls) is rewritten by cu2cc.sh and compiled
# by g++ against a fiber-based stand-in for the CUDA runtime; the GPU parity
# tests, built against it, become CPU tests (build/tests/test_cuda_emu_*).
# They need no nvcc and no GPU, so `make test` runs them everywhere.
CXX          ?= g++
EMU_CU       := $(filter-out kernels/matmul.cu,$(CU_ALL))
EMU_C        := $(CPU_C) $(CUDA_C) $(if $(MPICC),$(NCCL_C),$(NCCL_STUB_C)) tests/cuda_emu/matmul_emu.c \
               tests/cuda_emu/cudnn_emu.c
EMU_FLAGS    := -DKVCPT_CUDA -DKVCPT_CUDA_EMU -DKVCPT_CUDNN -Itests/cuda_emu/include $(ATTN_FWD_ROWS_FLAG)
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
# The kernels reach what differs on the emulator (the tensor-core
# instructions, the vector access check, the driver probe) through the
# include path, as <kernels/mma_isa.cuh> and <kernels/platform.cuh>:
# EMU_FLAGS puts tests/cuda_emu/include, which holds the emulator's versions,
# before -I., where nvcc finds the GPU's.
# A .cu.cc under build/emu/D/ finds its own folder's headers through
# EMU_QUOTE (-iquote D, as nvcc finds them beside D/x.cu); -iquote kernels
# serves the rewritten kernels/*.cuh, which sit in build/emu/kernels/.
EMU_QUOTE     = -iquote $(dir $*)
EMU_FMA      := $(shell grep -qw fma /proc/cpuinfo 2>/dev/null && echo -mfma)
EMU_CXXFLAGS := -std=c++17 $(OPT) -g -ffp-contract=fast $(EMU_FMA) -D__CUDA_ARCH__=900 -include cuda_runtime.h -fopenmp -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
                -D_GNU_SOURCE $(EMU_FLAGS) -I. \
                -iquote kernels
EMU_TESTS    := ops_cuda adamw_cuda shard_ops_cuda attention_cuda attention_mma attention_cudnn model_cuda decode_cuda attention_decode_cuda mma mem_plan_cuda
EMU_BIN      := $(EMU_TESTS:%=build/tests/test_cuda_emu_%)
# the NCCL tests, on the plain emulator only (tests/cuda_emu/test_cuda_emu_nccl.sh
# runs them under mpirun; run.sh runs them once as a single rank)
ifneq ($(MPICC),)
EMU_BIN      += build/tests/test_cuda_emu_comm_nccl build/tests/test_cuda_emu_nccl_collectives
endif

# the .cu files rewritten once, into build/emu/; every variant compiles these
build/emu/%.cu.cc: %.cu tests/cuda_emu/cu2cc.sh
	@mkdir -p $(dir $@)
	bash tests/cuda_emu/cu2cc.sh $< $@

# kept, so make does not delete them after the test summary line
.SECONDARY: $(EMU_CU:%.cu=build/emu/%.cu.cc) build/emu/tests/cuda_emu/emu_checks.cu.cc build/emu/tests/gpu/mma_gemm.cu.cc

# the .cuh headers, rewritten as the .cu files are (static shared memory
# is counted); the .cu.cc files include these (build/emu/kernels/x.cuh)
# before the originals
# (all but the GPU's hook headers, which the emulator replaces, see above)
EMU_HOOK_CUH := kernels/mma_isa.cuh kernels/platform.cuh kernels/cp_async.cuh
EMU_CUH      := $(patsubst %,build/emu/%,$(filter-out $(EMU_HOOK_CUH),$(foreach d,$(DIRS),$(wildcard $(d)/*.cuh))))
$(EMU_CUH): build/emu/%.cuh: %.cuh tests/cuda_emu/cu2cc.sh
	@mkdir -p $(dir $@)
	bash tests/cuda_emu/cu2cc.sh $< $@

# The emulator's build variants, one directory each:
#  - emu (build/emu/): the plain emulator; its tests are build/tests/test_cuda_emu_*.
#  - emu-race (build/emu-race/): the race-detecting variant. The kernels (the
#    .cu.cc files, emu_checks.cu's too) are compiled with gcc's
#    -fsanitize=thread instrumentation and linked without libtsan: the calls it
#    adds go to tests/cuda_emu/emu_race.cc, which reports conflicting accesses
#    to shared and device memory that no barrier orders (docs/emulator.md). Its C
#    objects and emulated NCCL are build/emu's, unchanged.
#    tests/cuda_emu/test_cuda_emu_races.sh runs it.
#  - emu-asan (build/emu-asan/): the emulator under AddressSanitizer and UBSan,
#    the same sources as build/emu built with KVCPT_EMU_ASAN, which makes the
#    emulator allocate dynamic shared memory and cudaMalloc at exactly the
#    bytes asked for, tell ASan about its fiber stack switches, and poison red
#    zones between carved sub-buffers (common/redzone.h). `make sanitize-emu`
#    builds it and runs the emulated GPU tests, the planted bugs, the kernels
#    at Llama-3.1-8B shapes and the emulated-engine CLI tests on it (tens of
#    minutes on 2 cores: docs/emulator.md); `make test` builds the two quick
#    binaries and runs the planted bugs and most 8B-shape kernels
#    (tests/cuda_emu/test_cuda_emu_asan.sh).
# Per variant V: V_CFLAGS compile its C files and link its C programs,
# V_CXXFLAGS compile and link its C++ (kernels and runtime), V_KERNEL_FLAGS
# are added for the kernels alone, V_C_FROM names the variant whose C objects
# and emulated NCCL it links, V_RUNTIME lists its runtime objects, V_TESTS is
# where its test binaries go.
EMU_ASAN_FLAGS      := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined \
                       -DKVCPT_EMU_ASAN
emu_CFLAGS          := $(EMU_CFLAGS)
emu_CXXFLAGS        := $(EMU_CXXFLAGS)
emu_KERNEL_FLAGS    :=
emu_C_FROM          := emu
emu_RUNTIME         := emu_runtime emu_mma
emu_TESTS           := build/tests
emu-race_CFLAGS     := $(EMU_CFLAGS)
emu-race_CXXFLAGS   := $(EMU_CXXFLAGS) -DKVCPT_EMU_RACE -gdwarf-4
emu-race_KERNEL_FLAGS := -fsanitize=thread
emu-race_C_FROM     := emu
emu-race_RUNTIME    := emu_runtime emu_race emu_mma
emu-race_TESTS      := build/emu-race/tests
emu-asan_CFLAGS     := $(filter-out $(OPT),$(EMU_CFLAGS)) $(EMU_ASAN_FLAGS)
emu-asan_CXXFLAGS   := $(filter-out $(OPT),$(EMU_CXXFLAGS)) $(EMU_ASAN_FLAGS)
emu-asan_KERNEL_FLAGS :=
emu-asan_C_FROM     := emu-asan
emu-asan_RUNTIME    := emu_runtime emu_mma
emu-asan_TESTS      := build/emu-asan/tests

# the tensor-core primitives' test (tests/gpu/test_mma.c) links its own
# kernel file, a GEMM written with kernels/mma.cuh, beside the library
MMA_TEST_DEP := tests/gpu/test_mma.c tests/testlib.h tests/gpu/gpu_testlib.h

# EMU_VARIANT V: the rules of build/V/
define EMU_VARIANT
$(1)_RUNTIME_OBJ := $$($(1)_RUNTIME:%=build/$(1)/%.o)
$(1)_PROG_OBJ    := $$(filter $$(PROG_DIRS:%=build/$$($(1)_C_FROM)/%/%),$$(EMU_C:%.c=build/$$($(1)_C_FROM)/%.o))
$(1)_OBJ         := $$(filter-out $$($(1)_PROG_OBJ),$$(EMU_C:%.c=build/$$($(1)_C_FROM)/%.o)) $$(EMU_CU:%.cu=build/$(1)/%.cu.o) \
                    $$($(1)_RUNTIME_OBJ) $$(EMU_NCCL_OBJ:%=build/$$($(1)_C_FROM)/%)
$(1)_LIB         := build/$(1)/libkvcpt_emu.a
# the kernels and the two lowest layers they stand on (common/, kernels/):
# all that kernels_8b links, so `make test`, which runs it in build/emu-asan,
# does not compile the rest of the library with the sanitizers
$(1)_KERNELS_LIB := build/$(1)/libkvcpt_emu_kernels.a
$(1)_KERNELS_OBJ := $$(filter build/$$($(1)_C_FROM)/common/% build/$$($(1)_C_FROM)/kernels/%,$$(EMU_C:%.c=build/$$($(1)_C_FROM)/%.o)) \
                    $$(EMU_CU:%.cu=build/$(1)/%.cu.o) $$($(1)_RUNTIME_OBJ)
$(1)_LINK         = $$(CC) $$($(1)_CFLAGS) $$(BIN_DEPFLAGS) $$< $$(filter %.o,$$^) $$($(1)_LIB) $$(BASE_LDLIBS) -lstdc++ -o $$@

ifeq ($$($(1)_C_FROM),$(1))
build/$(1)/%.o: %.c $$(OBJ_DEPS)
	@mkdir -p $$(dir $$@)
	$$(CC) $$($(1)_CFLAGS) $$(DEPFLAGS) -c $$< -o $$@

# MPI's headers for the emulated NCCL only (the kernels never see them)
build/$(1)/emu_nccl.o: tests/cuda_emu/emu_nccl.cc $$(OBJ_DEPS)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$($(1)_CXXFLAGS) $$(MPI_CFLAGS) $$(DEPFLAGS) -c $$< -o $$@
endif

build/$(1)/%.cu.o: build/emu/%.cu.cc $$(OBJ_DEPS) | $$(EMU_CUH)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$(EMU_QUOTE) $$($(1)_CXXFLAGS) $$($(1)_KERNEL_FLAGS) $$(DEPFLAGS) -c $$< -o $$@

# the runtime: blocks, fibers and barriers (emu_runtime), the warp-level
# matrix instructions of kernels/mma.cuh (emu_mma), the race detector (emu_race)
$$($(1)_RUNTIME_OBJ): build/$(1)/%.o: tests/cuda_emu/%.cc $$(OBJ_DEPS)
	@mkdir -p $$(dir $$@)
	$$(CXX) $$($(1)_CXXFLAGS) $$(DEPFLAGS) -c $$< -o $$@

$$($(1)_LIB): $$($(1)_OBJ)
	rm -f $$@ && ar rcs $$@ $$^

$$($(1)_KERNELS_LIB): $$($(1)_KERNELS_OBJ)
	rm -f $$@ && ar rcs $$@ $$^

# the whole program on the emulated GPU: `kvcpt train --set device=cuda` on CI
build/$(1)/kvcpt: $$(MAIN_C) $$($(1)_PROG_OBJ) $$($(1)_LIB) $$(BIN_DEPS)
	$$($(1)_LINK)

build/$(1)/tools/%: tests/tools/%.c $$($(1)_LIB) $$(BIN_DEPS)
	@mkdir -p $$(dir $$@)
	$$($(1)_LINK)

# the training attention at Llama-3.1-8B shapes (tests/cuda_emu/test_cuda_emu_asan.sh)
build/$(1)/kernels_8b: tests/gpu/kernels_8b.c $$($(1)_KERNELS_LIB) $$(BIN_DEPS)
	$$(CC) $$($(1)_CFLAGS) $$(BIN_DEPFLAGS) $$< $$($(1)_KERNELS_LIB) $$(BASE_LDLIBS) -lstdc++ -o $$@

# the emulator's own checks: launch limits, planted races (tests/cuda_emu/test_cuda_emu_orders.sh)
build/$(1)/emu_checks: build/$(1)/tests/cuda_emu/emu_checks.cu.o $$($(1)_RUNTIME_OBJ)
	$$(CXX) $$($(1)_CXXFLAGS) $$^ -o $$@

$$($(1)_TESTS)/test_cuda_emu_%: tests/gpu/test_%.c tests/testlib.h tests/gpu/gpu_testlib.h $$($(1)_LIB) $$(BIN_DEPS)
	@mkdir -p $$(dir $$@)
	$$($(1)_LINK)

$$($(1)_TESTS)/test_cuda_emu_mma: $$(MMA_TEST_DEP) build/$(1)/tests/gpu/mma_gemm.cu.o $$($(1)_LIB) $$(BIN_DEPS)
	@mkdir -p $$(dir $$@)
	$$($(1)_LINK)
endef
$(foreach v,emu emu-race emu-asan,$(eval $(call EMU_VARIANT,$(v))))

# the binaries tests/cuda_emu/test_cuda_emu_races.sh runs (not the memory plan's test,
# which it leaves out)
RACE_BIN          := $(filter-out %_mem_plan_cuda,$(EMU_TESTS:%=build/emu-race/tests/test_cuda_emu_%)) build/emu-race/emu_checks
EMU_ASAN_BIN      := $(EMU_TESTS:%=build/emu-asan/tests/test_cuda_emu_%)
EMU_ASAN_ALL      := $(EMU_ASAN_BIN) build/emu-asan/kvcpt build/emu-asan/tools/dump_model_case \
                     build/emu-asan/emu_checks build/emu-asan/kernels_8b
ifneq ($(MPICC),)
EMU_ASAN_ALL      += build/emu-asan/tests/test_cuda_emu_comm_nccl build/emu-asan/tests/test_cuda_emu_nccl_collectives
endif

sanitize-emu-bins: kvcpt $(EMU_ASAN_ALL)

sanitize-emu: sanitize-emu-bins
	bash tests/sanitize_emu.sh

.PHONY: all setup format planted-test test test-bins test-quick test-quick-bins test-gpu test-gpu-bins clean fuzz sanitize sanitize-emu sanitize-emu-bins FORCE
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

build/%.o: %.c $(OBJ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

build/%.cu.o: %.cu $(OBJ_DEPS)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(DEPFLAGS) -c $< -o $@

# The attention kernels also keep ptxas's resource report (registers,
# spills, shared memory per kernel) beside their objects, for
# scripts/ptxas_report.sh: the build compiles them anyway, so the report
# costs no second compile. Other messages still reach the terminal.
ATTN_CU_OBJ := $(patsubst %.cu,build/%.cu.o,$(wildcard kernels/attention*.cu))
$(ATTN_CU_OBJ): build/%.cu.o: %.cu $(OBJ_DEPS) $$(if $$(wildcard $$@.ptxas),,FORCE)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(DEPFLAGS) -Xptxas -v -c $< -o $@ 2>$@.ptxas || { cat $@.ptxas >&2; exit 1; }
	@grep -v -e '^ptxas info' -e '^    [0-9]* bytes stack frame' $@.ptxas >&2 || true

build/libkvcpt.a: $(LIB_OBJ)
	@mkdir -p build
	rm -f $@ && ar rcs $@ $^

# its dependency file in build/, not beside it in the source tree
kvcpt: $(MAIN_C) $(PROG_OBJ) build/libkvcpt.a $$(if $$(wildcard build/.kvcpt.d),,FORCE)
	$(CC) $(CFLAGS) -MMD -MP -MF build/.kvcpt.d $< $(PROG_OBJ) build/libkvcpt.a $(LDLIBS) -o $@

define c_test_rule
build/tests/$(basename $(notdir $(1))): $(1) tests/testlib.h build/libkvcpt.a $$(BIN_DEPS)
	@mkdir -p $$(dir $$@)
	$$(CC) $$(CFLAGS) $$(BIN_DEPFLAGS) $$< $$(filter %.o,$$^) build/libkvcpt.a $$(LDLIBS) -o $$@
endef
$(foreach s,$(TEST_SRC),$(eval $(call c_test_rule,$(s))))
# A build from before the tests moved into their folders has dependency
# files naming tests/test_X.c: that old path is nothing to make, and the
# test's relink writes the new path.
tests/test_%.c: ;

# the tests that call a command link its object (cli/, bench/ are not in the library)
build/tests/test_convert: build/cli/cmd_convert.o

build/tests/tools/%: tests/tools/%.c build/libkvcpt.a $(BIN_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BIN_DEPFLAGS) $< build/libkvcpt.a $(LDLIBS) -o $@

build/tests/gpu/%: tests/gpu/%.c tests/testlib.h tests/gpu/gpu_testlib.h build/libkvcpt.a $(BIN_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BIN_DEPFLAGS) $< build/libkvcpt.a $(LDLIBS) -o $@

# with nvcc, the tensor-core test links its kernel file (tests/gpu/mma_gemm.cu)
ifneq ($(NVCC),)
build/tests/gpu/test_mma: $(MMA_TEST_DEP) build/tests/gpu/mma_gemm.cu.o build/libkvcpt.a $(BIN_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BIN_DEPFLAGS) $< build/tests/gpu/mma_gemm.cu.o build/libkvcpt.a $(LDLIBS) -o $@
endif

# A C test linked against a changed copy of one library source, whose
# definitions come before the library's (an archive member is only pulled
# for a symbol still undefined), so the test runs the changed code
# (tests/kernels/test_attention_planted.sh plants changes in the attention oracle
# and in the CPU fast path this way; nothing of the library changes):
#   make planted-test PLANTED=copy.c PLANTED_OF=kernels/x.c PLANTED_TEST=tests/FOLDER/test_x.c PLANTED_OUT=path
# The copy compiles as if it sat where PLANTED_OF does (its quoted
# includes); the library must be built already.
planted-test:
	@test -n "$(PLANTED)" -a -n "$(PLANTED_OF)" -a -n "$(PLANTED_TEST)" -a -n "$(PLANTED_OUT)" || \
	  { echo "make planted-test: set PLANTED, PLANTED_OF, PLANTED_TEST and PLANTED_OUT" >&2; exit 2; }
	@test -f build/libkvcpt.a || { echo "make planted-test: build/libkvcpt.a is not built (make test-bins)" >&2; exit 2; }
	$(CC) $(CFLAGS) -iquote $(dir $(PLANTED_OF)) -c $(PLANTED) -o $(PLANTED_OUT).o
	$(CC) $(CFLAGS) $(PLANTED_TEST) $(PLANTED_OUT).o build/libkvcpt.a $(LDLIBS) -o $(PLANTED_OUT)

setup:
	bash scripts/setup.sh

test: test-bins
	bash tests/run.sh cpu

# The inner loop: the CPU suite without the emulator's race and sanitizer
# variants (build/emu-race, build/emu-asan), whose builds take most of a
# fresh `make test`'s compile time, nor the three scripts that run them.
# `make test` still runs everything.
QUICK_SKIP := ^test_cuda_emu_(races|asan|cp_async)\.sh$$
test-quick: test-quick-bins
	KVCPT_TESTS_EXCLUDE='$(QUICK_SKIP)' bash tests/run.sh cpu

test-quick-bins: kvcpt $(TEST_BIN) $(TOOL_BIN) $(EMU_BIN) build/emu/kvcpt build/emu/tools/dump_model_case build/emu/emu_checks

# the CPU suite's binaries without running them
test-bins: kvcpt $(TEST_BIN) $(TOOL_BIN) $(EMU_BIN) build/emu/kvcpt build/emu/tools/dump_model_case build/emu/emu_checks $(RACE_BIN) \
           build/emu-asan/emu_checks build/emu-asan/kernels_8b

test-gpu: test-gpu-bins
	bash tests/run.sh gpu

# the GPU suite's binaries without running them (scripts/gpu_bundle.sh):
# kvcpt, every GPU test and the tools the suite's scripts run
test-gpu-bins: kvcpt $(GPU_BIN) $(GPU_TOOL_BIN)

clean:
	rm -rf build kvcpt

# `make sanitize`: the whole CPU program built with AddressSanitizer and UBSan
# (build/asan/kvcpt) runs every test script that runs the program (tests/FOLDER/test_*.sh that take
# their binary from KVCPT_BIN). Reports are written to build/asan/reports, not
# only to stderr, because a test that expects a refusal would take a
# sanitizer's exit status for one; any report fails the target. Not part of
# `make test` (about twice its command-line time).
SAN_FLAGS := -O1 -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
SAN_OBJ   := $(patsubst %.c,build/asan/%.o,$(CPU_C) $(CUDA_STUB_C) $(NCCL_STUB_C))
build/asan/%.o: %.c $(OBJ_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(SAN_FLAGS) $(DEPFLAGS) -c $< -o $@

build/asan/kvcpt: $(MAIN_C) tests/sanitize/report_hook.c $(SAN_OBJ)
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
# Rewrites every tracked C, C++ and CUDA source to .clang-format. Twice:
# clang-format 19 settles some initializer lists only on a second pass.
FORMAT_SRC = $(shell git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc')
format:
	clang-format-19 -i $(FORMAT_SRC)
	clang-format-19 -i $(FORMAT_SRC)

fuzz: build/libkvcpt.a
	@command -v clang >/dev/null 2>&1 || bash scripts/setup.sh fuzz
	@mkdir -p build/fuzz/corpus
	$(CC) $(CFLAGS) tests/fuzz/make_seeds.c build/libkvcpt.a $(LDLIBS) -o build/fuzz/make_seeds
	build/fuzz/make_seeds build/fuzz/corpus && rm -rf build/fuzz/corpus/run
	clang -std=c11 -g -O1 -D_GNU_SOURCE -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    tests/fuzz/fuzz_parsers.c $(FUZZ_SRC) -ljansson -o build/fuzz/fuzz_parsers
	build/fuzz/fuzz_parsers -max_total_time=$(FUZZ_SECONDS) -max_len=4096 -dict=tests/fuzz/safetensors.dict \
	    -print_final_stats=1 -artifact_prefix=build/fuzz/ build/fuzz/corpus

# the header dependencies the compiles wrote (see DEPFLAGS above)
-include $(shell find build -name '*.d' 2>/dev/null)
