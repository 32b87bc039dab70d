# Sourced by tests/cuda_emu/test_cuda_emu_orders.sh and tests/cuda_emu/test_cuda_emu_races.sh:
# the cases (KVCPT_TEST_CASES) of the longer emulated suites they run under
# other schedules and under the race detector, where every kernel and launch
# shape still runs but the plain run, in index order, keeps the rest.
#
# build/tests/test_cuda_emu_ops_cuda: every case but rmsnorm N=20001 C=3, a
# fifth of the binary's time in the emulator: its 20001 rows take the
# chunking past kMaxChunks x kMinChunkRows (kernels/rmsnorm.cu), where each
# chunk holds 79 rows instead of 64. The dweight reduction over several
# chunks, where a schedule or a race could show, runs here at N=1031 (17
# chunks); the large-N values are checked by the plain run.
ops_representative_cases="embedding N=|rmsnorm N=1 C=1|rmsnorm N=5 C=7|rmsnorm N=37 C=4099|rmsnorm N=1031 C=64"
ops_representative_cases+="|rope |swiglu |crossentropy |matmul "
# build/tests/test_cuda_emu_attention_mma: 6 of its 18 cases, 114 of its 240
# checks at about 60% of its time. Causal over several query and key tiles
# (T=130); the head dim of the 8B model (D=128); three of the one-pass
# backward's 128-key tiles with two dQ groups (T=300); the paper's mask with
# the suffix across a key tile (T=200 L=150); the eval cache's per-row
# records with B=2 (evict restride 10); and the bf16 entries of all three
# kernel families on a masked B=2 case. Left to the plain run: the edge
# shapes (T=1, T=7, S=1), K=L, mean aggregation (the selection, which
# test_cuda_emu_attention_cuda's cases run under both), restride 1.
mma_representative_cases="T=130 causal, ratio 4, D=32|T=200 L=150 K=40 (two key tiles|^T=65 causal, ratio 2, D=128"
mma_representative_cases+="|T=300 causal|evict restride 10 T=100|bf16 entries: T=100 L=80"
