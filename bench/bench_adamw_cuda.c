/* The CUDA half of `kvcpt bench adamw` (bench/bench_adamw_device.h): linked
 * only in builds with the CUDA backend. */
#include "bench_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/cuda_device.h"
#include "../optim/optim_cuda.h"

static double adamw_time_step(Optimizer *o, const float *p, const float *g, OptimDtype pd, const AdamWHyper *h,
                              int64_t n, int64_t steps) {
    OptimCuda *oc = optim_cuda_create(o);
    void *dp = cuda_malloc((size_t)n * 4), *dg = cuda_malloc((size_t)n * 4);
    cuda_memcpy_h2d(dg, g, (size_t)n * 4);
    if (pd == OPTIM_F32) {
        cuda_memcpy_h2d(dp, p, (size_t)n * 4);
    } else {
        uint16_t *pb = xmalloc((size_t)n * 2);
        for (int64_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &p[i], 4);
            pb[i] = (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
        }
        cuda_memcpy_h2d(dp, pb, (size_t)n * 2);
        free(pb);
    }
    optim_cuda_step(oc, dp, pd, dg, OPTIM_F32, h, 1);
    double best = 1e30;
    for (int64_t t = 2; t <= steps + 1; t++) {
        cuda_synchronize();
        double t0 = now_seconds();
        optim_cuda_step(oc, dp, pd, dg, OPTIM_F32, h, t); /* ends with a synchronizing copy */
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    cuda_free(dp);
    cuda_free(dg);
    optim_cuda_free(oc);
    return best;
}

const BenchAdamwDevice bench_adamw_cuda = {adamw_time_step, cuda_device_hbm_gbps, cuda_device_describe};
