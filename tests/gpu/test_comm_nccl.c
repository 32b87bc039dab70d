/* The NCCL backend of parallel/comm.h on device buffers with one rank (a single
 * GPU; more ranks need mpirun): all-gather-v and all-to-all-v land every
 * element where the CPU contract says. Skips without a GPU or NCCL. */
#include <string.h>

#include "../../common/backend.h"
#include "../../parallel/comm.h"
#include "../testlib.h"
#if defined(KVCPT_CUDA) && defined(KVCPT_NCCL)
#include <cuda_runtime.h>

static int run(void) {
    Comm *c = comm_open(1);
    enum { N = 10000 };
    float host[N], back[2 * N];
    for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f - 7.0f;
    float *d_send, *d_recv;
    if (cudaMalloc((void **)&d_send, sizeof host) != cudaSuccess || cudaMalloc((void **)&d_recv, sizeof back) != cudaSuccess)
        return 0;
    cudaMemcpy(d_send, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemset(d_recv, 0, sizeof back);
    int64_t counts[1] = {N}, displs[1] = {N / 2};
    comm_all_gather_v(c, COMM_F32, d_send, d_recv, counts, displs);
    cudaDeviceSynchronize();
    cudaMemcpy(back, d_recv, sizeof back, cudaMemcpyDeviceToHost);
    tl_identical("nccl all-gather-v (1 rank) places the piece at its displacement", back + N / 2, host, N);
    int64_t sd[1] = {100}, sc[1] = {N - 100}, rd[1] = {3}, rc[1] = {N - 100};
    comm_all_to_all_v(c, COMM_F32, d_send, sc, sd, d_recv, rc, rd);
    cudaDeviceSynchronize();
    cudaMemcpy(back, d_recv, sizeof back, cudaMemcpyDeviceToHost);
    tl_identical("nccl all-to-all-v (1 rank) moves send[sdispl..] to recv[rdispl..]", back + 3, host + 100, N - 100);
    cudaFree(d_send), cudaFree(d_recv);
    comm_close(c);
    return 1;
}
#endif

int main(void) {
#if defined(KVCPT_CUDA) && defined(KVCPT_NCCL)
    if (backend_cuda_device_count() == 0) tl_skip("nccl collectives", "no GPU visible");
    else if (!run()) tl_result(0, "nccl collectives", "cudaMalloc failed");
#else
    tl_skip("nccl collectives", "built without CUDA or NCCL");
#endif
    return tl_finish();
}
