# Sourced (bash): what a one-rank and an N-rank `kvcpt train` are compared
# by, shared by tests/train/test_train_cuda_emu_ranks.sh (emulated devices) and
# scripts/gpu_session.sh (real GPUs), so both read the logs the same way.

# DIR/log.jsonl without the fields that depend on timing or on the process
# (speed, memory, BLAS threads) or on the rank count by design (each rank's
# shard and collective traffic): what is left must not depend on the rank count
rank_log_strip() {
    sed -E 's/,"(tokens_per_s|gflops_per_s|peak_rss_mb|elapsed_s|gpu_engine_mb|gpu_shard_mb|gathers|gather_bytes|reduces|reduce_bytes|h2d_bytes|d2h_bytes)":[^,}]*//g;s/,"blas":\{[^}]*\}//' "$1/log.jsonl"
}

# The device line each rank prints (kernels/cuda_device.cu cuda_device_select),
# "kvcpt WHAT: rank R (local rank L of N): CUDA device D of M, NAME, PCI bus B",
# as "R D B", one line per rank in rank order
rank_placements() {
    sed -nE 's/^kvcpt [a-z_]+: rank ([0-9]+) \(local rank [0-9]+ of [0-9]+\): CUDA device ([0-9]+) of [0-9]+, .*, PCI bus ([0-9a-f:.]+).*/\1 \2 \3/p' "$1" | sort -n
}
