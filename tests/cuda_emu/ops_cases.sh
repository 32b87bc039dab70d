# Sourced by tests/test_cuda_emu_orders.sh and tests/test_cuda_emu_races.sh:
# the cases of build/tests/test_cuda_emu_ops_cuda they run (KVCPT_TEST_CASES).
# Every case but rmsnorm N=20001 C=3, a fifth of the binary's time in the
# emulator: its 20001 rows take the chunking past kMaxChunks x kMinChunkRows
# (kernels/rmsnorm.cu), where each chunk holds 79 rows instead of 64. The
# dweight reduction over several chunks, where a schedule or a race could
# show, runs here at N=1031 (17 chunks); the large-N values are checked by
# the plain run, in index order.
ops_representative_cases="embedding N=|rmsnorm N=1 C=1|rmsnorm N=5 C=7|rmsnorm N=37 C=4099|rmsnorm N=1031 C=64"
ops_representative_cases+="|rope |swiglu |crossentropy |matmul "
