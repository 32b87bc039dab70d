/* NCCL's collectives called directly, on any number of ranks (mpirun -np N;
 * one rank without it): all-reduce (every op, several types), reduce-scatter,
 * broadcast and all-gather (in and out of place), grouped send/recv around a
 * ring, on a stream of their own. The inputs are small integers, so the sums
 * are exact in any order and the same checks hold on a GPU with real NCCL;
 * the emulated NCCL's fixed rank order of reduction is checked where it
 * decides the result (emulator only). Built for the emulator as
 * build/tests/test_cuda_emu_nccl_collectives (tests/cuda_emu/test_cuda_emu_nccl.sh).
 *
 * KVCPT_TEST_NCCL_PLANT=op|root plants a mismatch on the last rank (another
 * reduction op, another broadcast root): the call must fail on every rank
 * (ncclInvalidUsage), the emulated NCCL naming the ranks on stderr.
 * =stall|abort: the last rank never enters an all-reduce; the others must
 * get an error back, from KVCPT_EMU_NCCL_TIMEOUT (stall) or from a watchdog
 * thread calling ncclCommAbort (abort), and see it in ncclCommGetAsyncError
 * (emulator only: real NCCL has no timeout of its own). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/cuda_device.h"
#include "../../parallel/comm.h"
#include "../testlib.h"
#if defined(KVCPT_CUDA) && defined(KVCPT_NCCL)
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <pthread.h>
#include <unistd.h>

#define NC(call)                                                                                                       \
    do {                                                                                                               \
        ncclResult_t nc_rc_ = (call);                                                                                  \
        if (nc_rc_ != ncclSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ncclGetErrorString(nc_rc_));          \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static int me, world;
static cudaStream_t st;

static void *dev(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "test_nccl_collectives: cudaMalloc(%zu) failed\n", bytes);
        exit(1);
    }
    return p;
}
static void up(void *d, const void *h, size_t bytes) { cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice); }
static void down(void *h, const void *d, size_t bytes) {
    cudaStreamSynchronize(st);
    cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost);
}
static uint16_t bf16_of_small_int(int v) { /* exact: small integers need no rounding */
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}
/* rank r's element i: small positive integers */
static int64_t x(int r, int64_t i) { return (r + 1) * (i % 5 + 1) + (i % 3); }

static void say(int ok, const char *what, int64_t bad_at) {
    char name[200];
    snprintf(name, sizeof name, "%s (rank %d of %d)", what, me, world);
    tl_result(ok, name, "element %lld differs", (long long)bad_at);
}

static void test_all_reduce(ncclComm_t comm) {
    enum { N = 1031 };
    static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    static const char *const names[] = {"sum", "prod", "max", "min", "avg"};
    int64_t hi[N], gi[N];
    for (int64_t i = 0; i < N; i++) hi[i] = x(me, i);
    int64_t *di = dev(sizeof hi), *oi = dev(sizeof hi);
    up(di, hi, sizeof hi);
    for (int k = 0; k < 5; k++) {
        NC(ncclAllReduce(di, oi, N, ncclInt64, ops[k], comm, st));
        down(gi, oi, sizeof gi);
        int64_t bad = -1;
        for (int64_t i = 0; i < N && bad < 0; i++) {
            int64_t want = k == 1 ? 1 : k == 3 ? INT64_MAX : k == 2 ? INT64_MIN : 0;
            for (int r = 0; r < world; r++) {
                int64_t v = x(r, i);
                want = k == 1 ? want * v : k == 2 ? (v > want ? v : want) : k == 3 ? (v < want ? v : want) : want + v;
            }
            if (k == 4) want /= world;
            if (gi[i] != want) bad = i;
        }
        char what[80];
        snprintf(what, sizeof what, "ncclAllReduce int64 %s", names[k]);
        say(bad < 0, what, bad);
    }
    /* float32 sum in place, float64 max, bfloat16 sum */
    float hf[N], gf[N];
    double hd[N], gd[N];
    uint16_t hb[N], gb[N];
    for (int64_t i = 0; i < N; i++)
        hf[i] = (float)x(me, i), hd[i] = (double)x(me, i) - 0.5, hb[i] = bf16_of_small_int((int)x(me, i));
    float *df = dev(sizeof hf);
    double *dd = dev(sizeof hd), *od = dev(sizeof hd);
    uint16_t *db = dev(sizeof hb);
    up(df, hf, sizeof hf), up(dd, hd, sizeof hd), up(db, hb, sizeof hb);
    NC(ncclAllReduce(df, df, N, ncclFloat32, ncclSum, comm, st));
    NC(ncclAllReduce(dd, od, N, ncclFloat64, ncclMax, comm, st));
    NC(ncclAllReduce(db, db, N, ncclBfloat16, ncclSum, comm, st));
    down(gf, df, sizeof gf), down(gd, od, sizeof gd), down(gb, db, sizeof gb);
    int64_t bf = -1, bd = -1, bb = -1;
    for (int64_t i = 0; i < N; i++) {
        int64_t s = 0, m = 0;
        for (int r = 0; r < world; r++) s += x(r, i), m = x(r, i) > m ? x(r, i) : m;
        if (bf < 0 && gf[i] != (float)s) bf = i;
        if (bd < 0 && gd[i] != (double)m - 0.5) bd = i;
        if (bb < 0 && gb[i] != bf16_of_small_int((int)s)) bb = i;
    }
    say(bf < 0, "ncclAllReduce float32 sum, in place", bf);
    say(bd < 0, "ncclAllReduce float64 max", bd);
    say(bb < 0, "ncclAllReduce bfloat16 sum, in place", bb);
#ifdef KVCPT_CUDA_EMU
    /* 1 + 1e8 - 1e8 is 0 in float when added in rank order, 1 when the last
     * two are added first (reverse order): the emulator's documented order */
    if (world >= 3) {
        float v = me == 0 ? 1.0f : me == 1 ? 1e8f : me == 2 ? -1e8f : 0.0f, got = -1.0f;
        volatile float ref = 1.0f;
        ref += 1e8f;
        ref += -1e8f;
        up(df, &v, sizeof v);
        NC(ncclAllReduce(df, df, 1, ncclFloat32, ncclSum, comm, st));
        down(&got, df, sizeof got);
        char what[120];
        snprintf(what, sizeof what, "emulated ncclAllReduce adds in rank order (1 + 1e8 - 1e8 = %g in float)",
                 (double)ref);
        say(got == ref, what, 0);
    }
#endif
    cudaFree(di), cudaFree(oi), cudaFree(df), cudaFree(dd), cudaFree(od), cudaFree(db);
}

static void test_reduce_scatter(ncclComm_t comm) {
    enum { RC = 517 };
    const int64_t n = (int64_t)world * RC;
    float *h = malloc((size_t)n * 4), got[RC];
    for (int64_t j = 0; j < n; j++) h[j] = (float)x(me, j);
    float *d = dev((size_t)n * 4), *o = dev(RC * 4);
    for (int inplace = 0; inplace < 2; inplace++) {
        up(d, h, (size_t)n * 4);
        float *out = inplace ? d + (int64_t)me * RC : o;
        NC(ncclReduceScatter(d, out, RC, ncclFloat32, ncclSum, comm, st));
        down(got, out, sizeof got);
        int64_t bad = -1;
        for (int64_t i = 0; i < RC && bad < 0; i++) {
            int64_t s = 0;
            for (int r = 0; r < world; r++) s += x(r, (int64_t)me * RC + i);
            if (got[i] != (float)s) bad = i;
        }
        say(bad < 0, inplace ? "ncclReduceScatter float32 sum, in place" : "ncclReduceScatter float32 sum", bad);
    }
    cudaFree(d), cudaFree(o), free(h);
}

static void test_broadcast_all_gather(ncclComm_t comm) {
    enum { N = 777 };
    double h[N], got[N];
    double *d = dev(sizeof h), *o = dev(sizeof h);
    int64_t bad = -1;
    for (int root = 0; root < world; root++) {
        for (int64_t i = 0; i < N; i++) h[i] = me == root ? (double)x(root, i) + 0.25 : -1.0;
        up(d, h, sizeof h);
        cudaMemset(o, 0, sizeof h);
        double *out = root % 2 ? d : o; /* odd roots in place */
        NC(ncclBroadcast(d, out, N, ncclFloat64, root, comm, st));
        down(got, out, sizeof got);
        for (int64_t i = 0; i < N && bad < 0; i++)
            if (got[i] != (double)x(root, i) + 0.25) bad = i;
    }
    say(bad < 0, "ncclBroadcast float64 from every root (odd roots in place)", bad);
    uint8_t *hb = malloc((size_t)world * N), *gb = malloc((size_t)world * N);
    for (int64_t i = 0; i < N; i++) hb[i] = (uint8_t)(x(me, i) * 7 + me);
    uint8_t *ds = dev(N), *dr = dev((size_t)world * N);
    for (int inplace = 0; inplace < 2; inplace++) {
        cudaMemset(dr, 0, (size_t)world * N);
        const uint8_t *src = ds;
        if (inplace) up(dr + (size_t)me * N, hb, N), src = dr + (size_t)me * N;
        else up(ds, hb, N);
        NC(ncclAllGather(src, dr, N, ncclUint8, comm, st));
        down(gb, dr, (size_t)world * N);
        bad = -1;
        for (int r = 0; r < world; r++)
            for (int64_t i = 0; i < N && bad < 0; i++)
                if (gb[(size_t)r * N + i] != (uint8_t)(x(r, i) * 7 + r)) bad = (int64_t)r * N + i;
        say(bad < 0, inplace ? "ncclAllGather uint8, in place" : "ncclAllGather uint8", bad);
    }
    cudaFree(d), cudaFree(o), cudaFree(ds), cudaFree(dr), free(hb), free(gb);
}

/* each rank sends 100 + its rank elements to the next, receives from the previous */
static void test_send_recv(ncclComm_t comm) {
    const int next = (me + 1) % world, prev = (me + world - 1) % world;
    const int64_t ns = 100 + me, nr = 100 + prev;
    int64_t *h = malloc((size_t)ns * 8), *got = malloc((size_t)nr * 8);
    for (int64_t i = 0; i < ns; i++) h[i] = x(me, i) * 1000 + me;
    int64_t *ds = dev((size_t)ns * 8), *dr = dev((size_t)nr * 8);
    up(ds, h, (size_t)ns * 8);
    NC(ncclGroupStart());
    NC(ncclSend(ds, (size_t)ns, ncclInt64, next, comm, st));
    NC(ncclRecv(dr, (size_t)nr, ncclInt64, prev, comm, st));
    NC(ncclGroupEnd());
    down(got, dr, (size_t)nr * 8);
    int64_t bad = -1;
    for (int64_t i = 0; i < nr && bad < 0; i++)
        if (got[i] != x(prev, i) * 1000 + prev) bad = i;
    say(bad < 0, "grouped ncclSend/ncclRecv around a ring, uneven counts", bad);
    cudaFree(ds), cudaFree(dr), free(h), free(got);
}

static void *watchdog(void *arg) {
    sleep(1);
    ncclCommAbort((ncclComm_t)arg);
    return NULL;
}

/* A mismatch or a stalled rank, on the last rank; see the top of the file. */
static void plant(ncclComm_t comm, const char *bug) {
    const int last = world - 1;
    float *d = dev(64 * 4);
    cudaMemset(d, 0, 64 * 4);
    ncclResult_t rc = ncclSuccess, async = ncclSuccess;
    if (strcmp(bug, "op") == 0) rc = ncclAllReduce(d, d, 64, ncclFloat32, me == last ? ncclMax : ncclSum, comm, st);
    else if (strcmp(bug, "root") == 0) rc = ncclBroadcast(d, d, 64, ncclFloat32, me == last ? 1 % world : 0, comm, st);
    else if (strcmp(bug, "stall") == 0 || strcmp(bug, "abort") == 0) {
        if (me == last) { /* stalls until rank 0 has seen the error */
            int go = 0;
            MPI_Recv(&go, 1, MPI_INT, 0, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            tl_result(1, "the stalled rank was released", "");
            return;
        }
        pthread_t t;
        if (strcmp(bug, "abort") == 0) pthread_create(&t, NULL, watchdog, comm);
        rc = ncclAllReduce(d, d, 64, ncclFloat32, ncclSum, comm, st);
        if (strcmp(bug, "abort") == 0) pthread_join(t, NULL);
        ncclCommGetAsyncError(comm, &async);
        char what[160];
        snprintf(what, sizeof what,
                 "a rank that never enters the all-reduce (%s): rank %d gets an error back, and "
                 "ncclCommGetAsyncError reports it",
                 bug, me);
        tl_result(rc == ncclRemoteError && async == ncclRemoteError, what, "call returned %d, async error %d", (int)rc,
                  (int)async);
        if (me == 0) {
            int go = 1;
            MPI_Send(&go, 1, MPI_INT, last, 99, MPI_COMM_WORLD);
        }
        return;
    } else {
        tl_result(0, "planted nccl bug", "unknown KVCPT_TEST_NCCL_PLANT=%s", bug);
        return;
    }
    char what[120];
    snprintf(what, sizeof what, "planted mismatch (%s on rank %d) fails the call on rank %d too", bug, last, me);
    tl_result(rc == ncclInvalidUsage, what, "the call returned %s", ncclGetErrorString(rc));
}

static void run(void) {
    Comm *c = comm_open(0);
    me = comm_rank(c), world = comm_world(c);
    /* the device of this rank's node-local rank (shared round-robin when
     * there are fewer), current before NCCL binds to it */
    cuda_device_select("test_nccl_collectives", me, comm_local_rank(c), comm_local_world(c), 1);
    int version = 0;
    NC(ncclGetVersion(&version));
    tl_result(version >= 2000, "ncclGetVersion", "version %d", version);
    ncclUniqueId id;
    if (me == 0) NC(ncclGetUniqueId(&id));
    if (world > 1 && MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) {
        tl_result(0, "broadcasting the ncclUniqueId", "MPI_Bcast failed");
        return;
    }
    ncclComm_t comm;
    NC(ncclCommInitRank(&comm, world, id, me));
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) {
        tl_result(0, "cudaStreamCreateWithFlags", "failed");
        return;
    }
    const char *bug = getenv("KVCPT_TEST_NCCL_PLANT");
    if (bug && *bug) {
        plant(comm, bug);
        ncclCommAbort(comm); /* the communicator may hold an unfinished operation */
    } else {
        test_all_reduce(comm);
        test_reduce_scatter(comm);
        test_broadcast_all_gather(comm);
        test_send_recv(comm);
        ncclResult_t async = ncclInternalError;
        NC(ncclCommGetAsyncError(comm, &async));
        say(async == ncclSuccess, "ncclCommGetAsyncError is ncclSuccess after correct calls", 0);
        NC(ncclCommDestroy(comm));
    }
    cudaStreamDestroy(st);
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
