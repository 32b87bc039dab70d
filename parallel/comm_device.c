/* The device collectives of parallel/comm_device.h: NCCL for several
 * ranks, the "device" backend (copies on the GPU) for one. */
#include "comm_device.h"

#include "../common/util.h"
#include "../kernels/cuda_device.h"
#include "comm_backend.h"

/* One rank: n elements from send + soff to recv + roff on the device. */
static void device_copy(CommType t, const void *send, int64_t soff, void *recv, int64_t roff, int64_t n) {
    const size_t es = comm_type_size(t);
    if (n <= 0) return;
    KV_CHECK(soff >= 0 && roff >= 0 && (uint64_t)n <= SIZE_MAX / es,
             "comm device: a copy of %lld elements at %lld -> %lld", (long long)n, (long long)soff, (long long)roff);
    const char *src = (const char *)send + (size_t)soff * es;
    char *dst = (char *)recv + (size_t)roff * es;
    if (src != dst) cuda_memcpy_d2d(dst, src, (size_t)n * es);
}

static void device_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                                const int64_t *displs) {
    device_copy(t, send, 0, recv, displs[0], counts[0]);
}

static void device_wait(Comm *c) {}

static void device_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                void *recv, const int64_t *rcounts, const int64_t *rdispls) {
    KV_CHECK(scounts[0] == rcounts[0], "comm device: all-to-all sends %lld elements but receives %lld",
             (long long)scounts[0], (long long)rcounts[0]);
    device_copy(t, send, sdispls[0], recv, rdispls[0], scounts[0]);
}

/* no background gather: the copy runs at once, ordered on the device before
 * the kernels launched after it (cudaMemcpy on the default stream) */
static const CommOps device_ops = {.name = "device",
                                   .open = NULL,
                                   .close = NULL,
                                   .set_timeout = NULL,
                                   .all_gather_v = device_all_gather_v,
                                   .all_gather_v_start = NULL,
                                   .wait = device_wait,
                                   .all_to_all_v = device_all_to_all_v,
                                   .max_i64 = NULL,
                                   .barrier = NULL};

void comm_use_device(Comm *c) {
    if (c->data) return;
    if (c->world > 1) {
        comm_use_nccl(c);
        return;
    }
    c->data = &device_ops;
    c->backend = COMM_DEVICE;
}
