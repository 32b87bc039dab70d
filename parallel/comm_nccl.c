/* The NCCL backend of parallel/comm.h, linked where NCCL was found; only
 * its table, comm_nccl_ops (parallel/comm_backend.h), leaves this file.
 * Device buffers, collectives on the communicator's own stream, the caller's
 * stream ordered before and after them with events. MPI broadcasts the
 * ncclUniqueId. Runs on the current device, which the caller picked
 * (cuda_device_select: one GPU per rank) before opening. */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>

#include "../common/util.h"
#include "comm_backend.h"
#include "nccl_check.h"
#include "nccl_watchdog.h"

typedef struct CommNccl {
    ncclComm_t comm;
    cudaStream_t stream;          /* collectives run here */
    cudaStream_t compute;         /* the caller's stream */
    cudaEvent_t before, after;
    cudaEvent_t gathered;         /* the background all-gather's end */
    int rank, world, device;
    NcclWatchdog *watch; /* NULL: timeout 0, operations not watched */
} CommNccl;

static CommNccl *comm_nccl_open(int rank, int world) {
    int ndev = 0, dev = -1;
    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    KV_CHECK(ndev > 0, "nccl: no CUDA device visible to rank %d", rank);
    /* the device the caller selected (cuda_device_select): choosing here
     * would come after the caller's own allocations on another one */
    CUDA_CHECK(cudaGetDevice(&dev));
    KV_CHECK(dev >= 0 && dev < ndev, "nccl: rank %d's current device %d is not one of the %d visible", rank, dev, ndev);
    CommNccl *n = xcalloc(1, sizeof *n);
    n->rank = rank, n->world = world, n->device = dev;
    ncclUniqueId id;
    if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    if (world > 1) {
        int rc = MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
        KV_CHECK(rc == MPI_SUCCESS, "nccl: broadcasting the ncclUniqueId over MPI failed (code %d)", rc);
    }
    NCCL_CHECK(ncclCommInitRank(&n->comm, world, id, rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&n->before, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&n->after, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&n->gathered, cudaEventDisableTiming));
    return n;
}

/* > 0: a watchdog thread ends the process when an operation has not
 * finished this many seconds after it was enqueued, or NCCL reports an
 * asynchronous error (parallel/nccl_watchdog.h); 0: not watched (the
 * default of a new communicator). Call between operations. */
static void comm_nccl_set_timeout(CommNccl *n, double seconds) {
    KV_CHECK(seconds >= 0, "nccl: rank %d: timeout must be >= 0 seconds (got %g)", n->rank, seconds);
    nccl_watchdog_stop(n->watch);
    n->watch = seconds > 0 ? nccl_watchdog_start(n->comm, n->rank, n->world, n->device, seconds) : NULL;
}

/* Waits for the communicator's stream (watched), then ends it. */
static void comm_nccl_close(CommNccl *n) {
    if (!n) return;
    CUDA_CHECK(cudaStreamSynchronize(n->stream)); /* still watched: a peer that never comes ends the job here */
    nccl_watchdog_stop(n->watch);
    n->watch = NULL;
    NCCL_CHECK(ncclCommDestroy(n->comm));
    CUDA_CHECK(cudaEventDestroy(n->before));
    CUDA_CHECK(cudaEventDestroy(n->after));
    CUDA_CHECK(cudaEventDestroy(n->gathered));
    CUDA_CHECK(cudaStreamDestroy(n->stream));
    free(n);
}

static ncclDataType_t nccl_type(CommType t) {
    switch (t) {
        case COMM_F32: return ncclFloat32;
        case COMM_F64: return ncclFloat64;
        case COMM_I64: return ncclInt64;
        case COMM_U8: return ncclUint8;
    }
    die("nccl: unknown element type %d", (int)t);
}

/* Collectives start after the compute stream's work so far, and the compute
 * stream's later work waits for them. The watchdog's clock for the operation
 * `what` starts here; begin's ticket goes to end. */
static int64_t begin(CommNccl *n, const char *what) {
    int64_t ticket = n->watch ? nccl_watchdog_enter(n->watch, what) : -1;
    CUDA_CHECK(cudaEventRecord(n->before, n->compute));
    CUDA_CHECK(cudaStreamWaitEvent(n->stream, n->before, 0));
    NCCL_CHECK(ncclGroupStart());
    return ticket;
}

/* done is recorded after the group; join: the compute stream waits for it
 * now (else comm_nccl_wait makes it wait later). */
static void end(CommNccl *n, int64_t ticket, cudaEvent_t done, int join) {
    NCCL_CHECK(ncclGroupEnd());
    CUDA_CHECK(cudaEventRecord(done, n->stream));
    if (join) CUDA_CHECK(cudaStreamWaitEvent(n->compute, done, 0));
    if (n->watch) nccl_watchdog_leave(n->watch, ticket, n->stream);
}

/* NCCL has no all-gather with per-rank counts: one broadcast per root, grouped. */
static void enqueue_all_gather_v(CommNccl *n, CommType t, const void *send, void *recv, const int64_t *counts,
                                 const int64_t *displs, int background) {
    size_t es = comm_type_size(t);
    int64_t ticket = begin(n, "all-gather-v (grouped ncclBroadcast)");
    for (int r = 0; r < n->world; r++)
        if (counts[r] > 0)
            NCCL_CHECK(ncclBroadcast(r == n->rank ? send : (const char *)recv + displs[r] * es,
                                     (char *)recv + displs[r] * es, (size_t)counts[r], nccl_type(t), r, n->comm,
                                     n->stream));
    end(n, ticket, background ? n->gathered : n->after, !background);
}

static void comm_nccl_all_gather_v(CommNccl *n, CommType t, const void *send, void *recv, const int64_t *counts,
                                   const int64_t *displs) {
    enqueue_all_gather_v(n, t, send, recv, counts, displs, 0);
}

/* comm_nccl_all_gather_v with the caller's stream left free: only
 * comm_nccl_wait makes it wait for the gather, so the compute enqueued
 * between the two overlaps it (a layer's prefetch). One at a time. */
static void comm_nccl_all_gather_v_start(CommNccl *n, CommType t, const void *send, void *recv, const int64_t *counts,
                                         const int64_t *displs) {
    enqueue_all_gather_v(n, t, send, recv, counts, displs, 1);
}

static void comm_nccl_wait(CommNccl *n) { CUDA_CHECK(cudaStreamWaitEvent(n->compute, n->gathered, 0)); }

static void comm_nccl_all_to_all_v(CommNccl *n, CommType t, const void *send, const int64_t *scounts,
                                   const int64_t *sdispls, void *recv, const int64_t *rcounts, const int64_t *rdispls) {
    size_t es = comm_type_size(t);
    int64_t ticket = begin(n, "all-to-all-v (grouped ncclSend/ncclRecv)");
    for (int r = 0; r < n->world; r++) {
        if (scounts[r] > 0)
            NCCL_CHECK(ncclSend((const char *)send + sdispls[r] * es, (size_t)scounts[r], nccl_type(t), r, n->comm,
                                n->stream));
        if (rcounts[r] > 0)
            NCCL_CHECK(
                ncclRecv((char *)recv + rdispls[r] * es, (size_t)rcounts[r], nccl_type(t), r, n->comm, n->stream));
    }
    end(n, ticket, n->after, 1);
}

/* ---- the nccl backend's table (comm_backend.h): the data collectives of
 * a Comm whose control plane stays on MPI (or single) ---- */

static CommNccl *nccl_of(const Comm *c) { return c->data_state; }

static void *nccl_open(Comm *c) { return comm_nccl_open(c->rank, c->world); }

static void nccl_close(Comm *c) { comm_nccl_close(nccl_of(c)); }

static void nccl_set_timeout(Comm *c, double seconds) { comm_nccl_set_timeout(nccl_of(c), seconds); }

static void nccl_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                              const int64_t *displs) {
    comm_nccl_all_gather_v(nccl_of(c), t, send, recv, counts, displs);
}

static void nccl_all_gather_v_start(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                                    const int64_t *displs) {
    comm_nccl_all_gather_v_start(nccl_of(c), t, send, recv, counts, displs);
}

static void nccl_wait(Comm *c) { comm_nccl_wait(nccl_of(c)); }

static void nccl_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                              void *recv, const int64_t *rcounts, const int64_t *rdispls) {
    comm_nccl_all_to_all_v(nccl_of(c), t, send, scounts, sdispls, recv, rcounts, rdispls);
}

/* The reductions and barriers of the control plane stay on the host's backend. */
static const CommOps nccl_ops = {.name = "nccl",
                                 .open = nccl_open,
                                 .close = nccl_close,
                                 .set_timeout = nccl_set_timeout,
                                 .all_gather_v = nccl_all_gather_v,
                                 .all_gather_v_start = nccl_all_gather_v_start,
                                 .wait = nccl_wait,
                                 .all_to_all_v = nccl_all_to_all_v,
                                 .max_i64 = NULL,
                                 .barrier = NULL};

const CommOps *comm_nccl_ops(void) { return &nccl_ops; }
