#include "comm.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "comm_backend.h"

const char *comm_backend_name(CommBackend b) {
    return b == COMM_MPI ? "mpi" : b == COMM_NCCL ? "nccl" : b == COMM_DEVICE ? "device" : "single";
}

const char *comm_compiled_backends(void) {
    if (comm_mpi_ops() && comm_nccl_ops()) return "single, mpi, nccl";
    if (comm_mpi_ops()) return "single, mpi (nccl not compiled: no nccl.h or no MPI)";
    return "single (mpi not compiled: no mpicc found at build time)";
}

/* Before MPI_Init (or without MPI) only the launcher's environment says how
 * many ranks it started. */
static int env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : fallback;
}

int comm_launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("MPI_LOCALNRANKS");
}

int comm_launcher_world(void) {
    if (!comm_launched_by_mpi()) return 1;
    int n = env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", env_int("MPI_LOCALNRANKS", 0)));
    /* PMIx alone names only this rank: a rank above 0 proves a world above 1 */
    if (n <= 0) n = env_int("PMIX_RANK", 0) + 1;
    return n;
}

int comm_launcher_rank(void) {
    if (!comm_launched_by_mpi()) return 0;
    return env_int("OMPI_COMM_WORLD_RANK", env_int("PMI_RANK", env_int("PMIX_RANK", 0)));
}

size_t comm_type_size(CommType t) {
    switch (t) {
        case COMM_F32: return 4;
        case COMM_F64: return 8;
        case COMM_I64: return 8;
        case COMM_U8: return 1;
    }
    die("comm: unknown element type %d", (int)t);
}

/* One rank: every collective is a copy from send to recv. */
static void local_copy(CommType t, const void *send, int64_t soff, void *recv, int64_t roff, int64_t n) {
    size_t es = comm_type_size(t);
    if (n > 0 && (const char *)send + soff * es != (char *)recv + roff * es)
        memmove((char *)recv + roff * es, (const char *)send + soff * es, (size_t)n * es);
}

/* ---- the single backend: one rank, every collective a copy ---- */

static void single_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                                const int64_t *displs) {
    local_copy(t, send, 0, recv, displs[0], counts[0]);
}

static void single_wait(Comm *c) {}

static void single_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                                void *recv, const int64_t *rcounts, const int64_t *rdispls) {
    KV_CHECK(scounts[0] == rcounts[0], "comm: all-to-all sends %lld elements but receives %lld", (long long)scounts[0],
             (long long)rcounts[0]);
    local_copy(t, send, sdispls[0], recv, rdispls[0], scounts[0]);
}

static int64_t single_max_i64(Comm *c, int64_t v) { return v; }

static void single_barrier(Comm *c) {}

static const CommOps single_ops = {.name = "single",
                                   .open = NULL,
                                   .close = NULL,
                                   .set_timeout = NULL,
                                   .all_gather_v = single_all_gather_v,
                                   .all_gather_v_start = NULL,
                                   .wait = single_wait,
                                   .all_to_all_v = single_all_to_all_v,
                                   .max_i64 = single_max_i64,
                                   .barrier = single_barrier};

/* The host collectives: one rank copies, whatever backend is open. */
static const CommOps *host_ops(const Comm *c) { return c->world == 1 ? &single_ops : c->host; }

/* The collectives on the sharding's buffers: the device's once on (NCCL,
 * or one rank's copies on the GPU: parallel/comm_device.h), the host's
 * otherwise. */
static const CommOps *data_ops(const Comm *c) { return c->data ? c->data : host_ops(c); }

Comm *comm_open(int want_nccl) {
    Comm *c = xcalloc(1, sizeof *c);
    c->world = 1, c->local_world = 1;
    c->timeout_s = COMM_DEFAULT_TIMEOUT_S;
    c->host = &single_ops;
    if (comm_launched_by_mpi()) {
        const CommOps *mpi = comm_mpi_ops();
        if (mpi) {
            c->host_state = mpi->open(c);
            c->host = mpi;
            c->backend = COMM_MPI;
        } else if (comm_launcher_world() > 1) {
            die("started by an MPI launcher with several ranks, but this kvcpt was built without MPI; hint: install "
                "libopenmpi-dev (make setup) and rebuild (make clean && make)");
        }
    }
    if (want_nccl) comm_use_nccl(c);
    return c;
}

void comm_use_nccl(Comm *c) {
    const CommOps *nccl = comm_nccl_ops();
    if (!nccl)
        die("NCCL was asked for on rank %d, but this kvcpt was built without it; hint: build where nccl.h and mpicc "
            "are found",
            c->rank);
    KV_CHECK(!c->data, "comm_use_nccl: rank %d already has its NCCL communicator", c->rank);
    c->data_state = nccl->open(c);
    c->data = nccl;
    nccl->set_timeout(c, c->timeout_s);
    c->backend = COMM_NCCL;
}

void comm_close(Comm *c) {
    if (!c) return;
    if (c->data && c->data->close) c->data->close(c);
    comm_wait(c);
    if (c->host->close) c->host->close(c);
    free(c);
}

int comm_rank(const Comm *c) { return c->rank; }
int comm_world(const Comm *c) { return c->world; }
int comm_local_rank(const Comm *c) { return c->local_rank; }
int comm_local_world(const Comm *c) { return c->local_world; }

void comm_set_timeout(Comm *c, double seconds) {
    KV_CHECK(seconds >= 0 && seconds <= 1e7, "comm: timeout must be in [0, 1e7] seconds (got %g)", seconds);
    c->timeout_s = seconds;
    if (c->data && c->data->set_timeout) c->data->set_timeout(c, seconds);
}
CommBackend comm_backend(const Comm *c) { return c->backend; }

void comm_host_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                            const int64_t *displs) {
    host_ops(c)->all_gather_v(c, t, send, recv, counts, displs);
}

void comm_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                       const int64_t *displs) {
    data_ops(c)->all_gather_v(c, t, send, recv, counts, displs);
}

void comm_all_gather_v_start(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                             const int64_t *displs) {
    KV_CHECK(!c->pending, "comm: a background all-gather is already in flight");
    const CommOps *o = data_ops(c);
    if (!o->all_gather_v_start) { /* single: a copy */
        o->all_gather_v(c, t, send, recv, counts, displs);
        return;
    }
    o->all_gather_v_start(c, t, send, recv, counts, displs);
    c->pending = 1;
}

void comm_wait(Comm *c) {
    if (!c->pending) return;
    data_ops(c)->wait(c);
    c->pending = 0;
}

void comm_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                       void *recv, const int64_t *rcounts, const int64_t *rdispls) {
    data_ops(c)->all_to_all_v(c, t, send, scounts, sdispls, recv, rcounts, rdispls);
}

int64_t comm_max_i64(Comm *c, int64_t v) { return host_ops(c)->max_i64(c, v); }

void comm_barrier(Comm *c) { host_ops(c)->barrier(c); }
