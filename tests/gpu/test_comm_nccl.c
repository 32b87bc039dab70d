/* The NCCL backend of parallel/comm.h on device buffers, on any number of
 * ranks (mpirun -np N; one rank without it): all-gather-v and all-to-all-v
 * with uneven and zero counts and gaps between the pieces, for every
 * CommType, checked element by element against the layout the CPU contract
 * gives (gaps untouched). Runs on a GPU with NCCL, and on the CUDA emulator
 * with its NCCL over MPI (build/tests/test_cuda_emu_comm_nccl,
 * tests/cuda_emu/test_cuda_emu_nccl.sh).
 *
 * Each rank takes the device of its node-local rank (cuda_device_select,
 * shared round-robin when there are fewer devices than ranks) before NCCL
 * binds to it, as training does: one GPU per rank where there are enough.
 *
 * KVCPT_TEST_NCCL_PLANT=count|host|short|sendrecv|device plants a bug on the
 * last rank instead (a different count, a host buffer, a receive buffer one
 * element short, a receive that matches no send, a send buffer allocated on
 * another device than the communicator's): the emulated NCCL must end the
 * job with a message; reaching the end is a failure.
 *
 * KVCPT_TEST_NCCL_PLANT=nowait: the last rank reads a background
 * all-gather's result before comm_wait: the emulator's stream-order check
 * must stop it (emu::stream_writes in tests/cuda_emu/include/cuda_runtime.h).
 *
 * KVCPT_TEST_NCCL_PLANT=skip: after one all-gather-v that every rank takes
 * part in, the last rank skips the next one and waits forever; the others
 * must never return from it. With KVCPT_TEST_NCCL_TIMEOUT=T (seconds, set
 * with comm_set_timeout before NCCL opens, as `kvcpt train` sets
 * comm_timeout) the NCCL watchdog (parallel/nccl_watchdog.c) ends them after
 * T s naming the operation; with T = 0 only the emulated NCCL's own
 * KVCPT_EMU_NCCL_TIMEOUT does (tests/cuda_emu/test_cuda_emu_nccl.sh shows both).
 * KVCPT_TEST_NCCL_TIMEOUT_LATER=1 sets T once NCCL is open instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../kernels/cuda_device.h"
#include "../../parallel/comm.h"
#include "../testlib.h"
#if defined(KVCPT_CUDA) && defined(KVCPT_NCCL)
#include <cuda_runtime.h>

static const CommType kTypes[] = {COMM_F32, COMM_F64, COMM_I64, COMM_U8};
static const char *const kTypeNames[] = {"f32", "f64", "i64", "u8"};

/* element i of the piece tagged `tag` (distinct per sender and receiver) */
static void put_value(CommType t, void *buf, int64_t at, int64_t tag, int64_t i) {
    switch (t) {
        case COMM_F32: ((float *)buf)[at] = (float)(tag * 1000 + i) * 0.25f - 3.0f; break;
        case COMM_F64: ((double *)buf)[at] = (double)(tag * 100000 + i) * 0.125 - 7.0; break;
        case COMM_I64: ((int64_t *)buf)[at] = tag * 1000000007LL + i * 3 - 5; break;
        case COMM_U8: ((uint8_t *)buf)[at] = (uint8_t)(tag * 31 + i * 7 + 1); break;
    }
}

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "test_comm_nccl: cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}

/* The first element of got that differs from want (bytes of es each), or -1. */
static int64_t first_diff(const uint8_t *got, const uint8_t *want, int64_t n, size_t es) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(got + (size_t)i * es, want + (size_t)i * es, es) != 0) return i;
    return -1;
}

static void check_elements(const char *what, const uint8_t *got, const uint8_t *want, int64_t n, size_t es) {
    int64_t d = first_diff(got, want, n, es);
    if (d < 0) tl_result(1, what, "");
    else
        tl_result(0, what, "element %lld of %lld differs (byte %02x, expected %02x)", (long long)d, (long long)n,
                  got[(size_t)d * es], want[(size_t)d * es]);
}

/* counts: rank r sends counts[r] elements; every third rank (and, past two
 * ranks, rank 0 on odd types) sends none; pieces are separated by gaps */
static void gather_layout(int world, int ti, int64_t *counts, int64_t *displs, int64_t *total) {
    int64_t at = 1;
    for (int r = 0; r < world; r++) {
        counts[r] = (r % 3 == 1 || (world > 2 && r == 0 && ti % 2 == 1)) ? 0 : 37 * r + 5 + 11 * ti;
        displs[r] = at;
        at += counts[r] + 1 + r % 2;
    }
    *total = at;
}

static void test_all_gather_v(Comm *c, int ti) {
    const int world = comm_world(c), me = comm_rank(c);
    const CommType t = kTypes[ti];
    const size_t es = comm_type_size(t);
    int64_t *counts = calloc((size_t)world, sizeof *counts), *displs = calloc((size_t)world, sizeof *displs), total;
    gather_layout(world, ti, counts, displs, &total);
    uint8_t *host = calloc((size_t)(counts[me] + 1), es), *want = malloc((size_t)total * es),
            *got = malloc((size_t)total * es);
    for (int64_t i = 0; i < counts[me]; i++) put_value(t, host, i, me, i);
    memset(want, 0xA5, (size_t)total * es);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < counts[r]; i++) put_value(t, want, displs[r] + i, r, i);
    void *d_send = dev_alloc((size_t)(counts[me] + 1) * es), *d_recv = dev_alloc((size_t)total * es);
    cudaMemcpy(d_send, host, (size_t)(counts[me] + 1) * es, cudaMemcpyHostToDevice);
    cudaMemset(d_recv, 0xA5, (size_t)total * es);
    comm_all_gather_v(c, t, d_send, d_recv, counts, displs);
    cudaDeviceSynchronize();
    cudaMemcpy(got, d_recv, (size_t)total * es, cudaMemcpyDeviceToHost);
    char what[160];
    snprintf(what, sizeof what, "nccl all-gather-v %s, rank %d of %d: every piece at its displacement, gaps untouched",
             kTypeNames[ti], me, world);
    check_elements(what, got, want, total, es);
    cudaFree(d_send), cudaFree(d_recv);
    free(counts), free(displs), free(host), free(want), free(got);
}

/* elements rank s sends rank q: uneven, zero for some pairs */
static int64_t pair_count(int s, int q, int ti) { return (s + 2 * q + ti) % 4 == 0 ? 0 : 3 * s + q + 1 + 13 * ti; }

static void test_all_to_all_v(Comm *c, int ti) {
    const int world = comm_world(c), me = comm_rank(c);
    const CommType t = kTypes[ti];
    const size_t es = comm_type_size(t);
    int64_t *sc = calloc((size_t)world, 8), *sd = calloc((size_t)world, 8), *rc = calloc((size_t)world, 8),
            *rd = calloc((size_t)world, 8);
    int64_t stotal = 2, rtotal = 1;
    for (int q = 0; q < world; q++) { /* send pieces in rank order, two-element gaps */
        sc[q] = pair_count(me, q, ti), sd[q] = stotal;
        stotal += sc[q] + 2;
    }
    for (int r = world - 1; r >= 0; r--) { /* receive pieces in reverse rank order, one-element gaps */
        rc[r] = pair_count(r, me, ti), rd[r] = rtotal;
        rtotal += rc[r] + 1;
    }
    uint8_t *host = malloc((size_t)stotal * es), *want = malloc((size_t)rtotal * es),
            *got = malloc((size_t)rtotal * es);
    memset(host, 0x3C, (size_t)stotal * es);
    for (int q = 0; q < world; q++)
        for (int64_t i = 0; i < sc[q]; i++) put_value(t, host, sd[q] + i, me * 16 + q, i);
    memset(want, 0x5A, (size_t)rtotal * es);
    for (int r = 0; r < world; r++)
        for (int64_t i = 0; i < rc[r]; i++) put_value(t, want, rd[r] + i, r * 16 + me, i);
    void *d_send = dev_alloc((size_t)stotal * es), *d_recv = dev_alloc((size_t)rtotal * es);
    cudaMemcpy(d_send, host, (size_t)stotal * es, cudaMemcpyHostToDevice);
    cudaMemset(d_recv, 0x5A, (size_t)rtotal * es);
    comm_all_to_all_v(c, t, d_send, sc, sd, d_recv, rc, rd);
    cudaDeviceSynchronize();
    cudaMemcpy(got, d_recv, (size_t)rtotal * es, cudaMemcpyDeviceToHost);
    char what[160];
    snprintf(what, sizeof what, "nccl all-to-all-v %s, rank %d of %d: every piece from its sender, gaps untouched",
             kTypeNames[ti], me, world);
    check_elements(what, got, want, rtotal, es);
    cudaFree(d_send), cudaFree(d_recv);
    free(sc), free(sd), free(rc), free(rd), free(host), free(want), free(got);
}

/* One planted bug on the last rank; the collective must not return. */
static void plant(Comm *c, const char *bug) {
    const int world = comm_world(c), me = comm_rank(c), last = world - 1;
    int64_t *counts = calloc((size_t)world, 8), *displs = calloc((size_t)world, 8);
    for (int r = 0; r < world; r++) counts[r] = 100, displs[r] = 100 * r;
    float host[200] = {0};
    if (strcmp(bug, "count") == 0) {
        if (me == last) counts[0] = 99;
        void *s = dev_alloc(400), *r = dev_alloc((size_t)world * 400);
        comm_all_gather_v(c, COMM_F32, s, r, counts, displs);
    } else if (strcmp(bug, "host") == 0) {
        void *s = dev_alloc(400), *r = dev_alloc((size_t)world * 400);
        comm_all_gather_v(c, COMM_F32, me == last ? (void *)host : s, r, counts, displs);
    } else if (strcmp(bug, "short") == 0) {
        void *s = dev_alloc(400), *r = dev_alloc((size_t)world * 400 - (me == last ? 4 : 0));
        comm_all_gather_v(c, COMM_F32, s, r, counts, displs);
    } else if (strcmp(bug, "device") == 0) {
        /* the last rank's send buffer lives on the next device: a GPU without
         * peer access faults; needs two devices or more */
        int dev = 0, n = 0;
        cudaGetDevice(&dev);
        cudaGetDeviceCount(&n);
        if (me == last && cudaSetDevice((dev + 1) % n) != cudaSuccess)
            tl_result(0, "planted device bug", "cudaSetDevice");
        void *other = dev_alloc(400);
        if (me == last && cudaSetDevice(dev) != cudaSuccess) tl_result(0, "planted device bug", "cudaSetDevice back");
        void *r = dev_alloc((size_t)world * 400);
        comm_all_gather_v(c, COMM_F32, other, r, counts, displs);
    } else if (strcmp(bug, "sendrecv") == 0) {
        int64_t *rc = calloc((size_t)world, 8);
        for (int r = 0; r < world; r++) rc[r] = 100;
        if (me == last) rc[0] = 101;
        void *s = dev_alloc((size_t)world * 400), *r = dev_alloc((size_t)world * 404);
        comm_all_to_all_v(c, COMM_F32, s, counts, displs, r, rc, displs);
    } else if (strcmp(bug, "nowait") == 0) {
        /* a background all-gather whose result the last rank reads before
         * comm_wait orders its stream after it: on a GPU a partly written
         * buffer; the emulator must stop it (the others wait properly) */
        void *s = dev_alloc(400), *r = dev_alloc((size_t)world * 400);
        comm_all_gather_v_start(c, COMM_F32, s, r, counts, displs);
        if (me != last) comm_wait(c);
        cuda_memcpy_d2h(host, r, 400);
        if (me == last) comm_wait(c);
        comm_barrier(c);
    } else if (strcmp(bug, "skip") == 0) {
        void *s = dev_alloc(400), *r = dev_alloc((size_t)world * 400);
        comm_all_gather_v(c, COMM_F32, s, r, counts, displs);
        cudaDeviceSynchronize();
        fprintf(stderr, "test_comm_nccl: rank %d: all-gather-v #1 done\n", me);
        if (me == last) {
            fprintf(stderr, "test_comm_nccl: rank %d skips all-gather-v #2 and waits to be ended\n", me);
            for (;;) pause();
        }
        comm_all_gather_v(c, COMM_F32, s, r, counts, displs);
    } else {
        tl_result(0, "planted nccl bug", "unknown KVCPT_TEST_NCCL_PLANT=%s", bug);
        return;
    }
    cudaDeviceSynchronize();
    tl_result(0, "planted nccl bug", "%s on rank %d was not reported: the collective returned", bug, last);
}

/* KVCPT_TEST_NCCL_TIMEOUT, if set, into c's timeout */
static void set_timeout(Comm *c) {
    const char *timeout = getenv("KVCPT_TEST_NCCL_TIMEOUT");
    if (!timeout || !*timeout) return;
    char *end;
    double t = strtod(timeout, &end);
    if (*end) tl_result(0, "KVCPT_TEST_NCCL_TIMEOUT", "'%s' is not a number of seconds", timeout);
    else comm_set_timeout(c, t);
}

static void run(void) {
    Comm *c = comm_open(0);
    /* KVCPT_TEST_NCCL_TIMEOUT_LATER=1: set on the open communicator instead */
    const char *later = getenv("KVCPT_TEST_NCCL_TIMEOUT_LATER");
    const int set_later = later && strcmp(later, "1") == 0;
    if (!set_later) set_timeout(c);
    cuda_device_select("test_comm_nccl", comm_rank(c), comm_local_rank(c), comm_local_world(c), 1);
    comm_use_nccl(c);
    if (set_later) set_timeout(c);
    const char *bug = getenv("KVCPT_TEST_NCCL_PLANT");
    if (bug && *bug) plant(c, bug);
    else
        for (int ti = 0; ti < 4; ti++) {
            test_all_gather_v(c, ti);
            test_all_to_all_v(c, ti);
        }
    comm_close(c);
}
#endif

int main(void) {
#if defined(KVCPT_CUDA) && defined(KVCPT_NCCL)
    if (cuda_device_count() == 0) tl_skip("nccl collectives", "no GPU visible");
    else run();
#else
    tl_skip("nccl collectives", "built without CUDA or NCCL");
#endif
    return tl_finish();
}
