#include "comm.h"

#include <limits.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#ifdef KVCPT_MPI
#include <mpi.h>
#endif
#ifdef KVCPT_NCCL
#include "comm_nccl.h"
#endif

#ifdef KVCPT_MPI
#define MPI_CHECK(call)                                                                                       \
    do {                                                                                                      \
        int mpi_rc_ = (call);                                                                                 \
        if (mpi_rc_ != MPI_SUCCESS) {                                                                         \
            char mpi_msg_[MPI_MAX_ERROR_STRING];                                                              \
            int mpi_len_ = 0;                                                                                 \
            MPI_Error_string(mpi_rc_, mpi_msg_, &mpi_len_);                                                   \
            die("%s:%d: %s failed: %s", __FILE__, __LINE__, #call, mpi_msg_);                                 \
        }                                                                                                     \
    } while (0)
#endif

struct Comm {
    CommBackend backend;
    int rank, world, local_rank;
    int mpi_owned; /* we called MPI_Init, so we call MPI_Finalize */
    int pending;   /* a started all-gather not yet waited for */
#ifdef KVCPT_MPI
    MPI_Request req;
    int *req_counts; /* must outlive the request: 2 x world */
#endif
#ifdef KVCPT_NCCL
    CommNccl *nccl;
#endif
};

const char *comm_backend_name(CommBackend b) {
    return b == COMM_MPI ? "mpi" : b == COMM_NCCL ? "nccl" : "single";
}

const char *comm_compiled_backends(void) {
#if defined(KVCPT_MPI) && defined(KVCPT_NCCL)
    return "single, mpi, nccl";
#elif defined(KVCPT_MPI)
    return "single, mpi (nccl not compiled: no nccl.h or no MPI)";
#else
    return "single (mpi not compiled: no mpicc found at build time)";
#endif
}

static int env_int(const char *name, int fallback) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : fallback;
}

int comm_launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("MPI_LOCALNRANKS");
}

static int launcher_local_rank(void) {
    int r = env_int("OMPI_COMM_WORLD_LOCAL_RANK", -1);
    if (r < 0) r = env_int("MPI_LOCALRANKID", -1);
    if (r < 0) r = env_int("SLURM_LOCALID", -1);
    return r < 0 ? 0 : r;
}

#ifdef KVCPT_MPI
/* Ranks on one host split its cores between their OpenMP teams unless the
 * user said otherwise: N ranks x all cores each would thrash. */
static void share_cores(void) {
    if (getenv("OMP_NUM_THREADS")) return;
    int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", env_int("MPI_LOCALNRANKS", env_int("SLURM_NTASKS_PER_NODE", 1)));
    int cores = omp_get_num_procs();
    if (local > 1) omp_set_num_threads(cores / local > 1 ? cores / local : 1);
}
#endif

Comm *comm_open(int want_nccl) {
    Comm *c = xcalloc(1, sizeof *c);
    c->world = 1;
    if (comm_launched_by_mpi()) {
#ifdef KVCPT_MPI
        int inited = 0;
        MPI_CHECK(MPI_Initialized(&inited));
        if (!inited) {
            MPI_CHECK(MPI_Init(NULL, NULL));
            c->mpi_owned = 1;
        }
        MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &c->rank));
        MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &c->world));
        c->local_rank = launcher_local_rank();
        c->backend = COMM_MPI;
        share_cores();
#else
        if (env_int("OMPI_COMM_WORLD_SIZE", env_int("PMI_SIZE", 1)) > 1)
            die("started by an MPI launcher with several ranks, but this kvcpt was built without MPI; hint: install "
                "libopenmpi-dev (make setup) and rebuild (make clean && make)");
#endif
    }
    if (want_nccl) {
#ifdef KVCPT_NCCL
        c->nccl = comm_nccl_open(c->rank, c->world, c->local_rank);
        c->backend = COMM_NCCL;
#else
        die("NCCL was asked for, but this kvcpt was built without it; hint: build where nccl.h and mpicc are found");
#endif
    }
    return c;
}

void comm_close(Comm *c) {
    if (!c) return;
#ifdef KVCPT_NCCL
    if (c->nccl) comm_nccl_close(c->nccl);
#endif
    comm_wait(c);
#ifdef KVCPT_MPI
    free(c->req_counts);
    if (c->mpi_owned) MPI_Finalize();
#endif
    free(c);
}

int comm_rank(const Comm *c) { return c->rank; }
int comm_world(const Comm *c) { return c->world; }
int comm_local_rank(const Comm *c) { return c->local_rank; }
CommBackend comm_backend(const Comm *c) { return c->backend; }

size_t comm_type_size(CommType t) {
    switch (t) {
    case COMM_F32: return 4;
    case COMM_F64: return 8;
    case COMM_I64: return 8;
    case COMM_U8: return 1;
    }
    die("comm: unknown element type %d", (int)t);
}

#ifdef KVCPT_MPI
static MPI_Datatype mpi_type(CommType t) {
    switch (t) {
    case COMM_F32: return MPI_FLOAT;
    case COMM_F64: return MPI_DOUBLE;
    case COMM_I64: return MPI_INT64_T;
    case COMM_U8: return MPI_UINT8_T;
    }
    die("comm: unknown element type %d", (int)t);
}

/* MPI-3 counts are int: a unit larger than that must be split by the caller. */
static void mpi_counts_into(const Comm *c, const int64_t *v, int *out, const char *what) {
    for (int r = 0; r < c->world; r++) {
        KV_CHECK(v[r] >= 0 && v[r] <= INT_MAX,
                 "comm: %s[%d] = %lld does not fit MPI's int counts; hint: shard by smaller units", what, r,
                 (long long)v[r]);
        out[r] = (int)v[r];
    }
}

static int *mpi_counts(const Comm *c, const int64_t *v, const char *what) {
    int *out = xmalloc(sizeof(int) * (size_t)c->world);
    mpi_counts_into(c, v, out, what);
    return out;
}

static void mpi_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                             const int64_t *displs) {
    int *ic = mpi_counts(c, counts, "count"), *id = mpi_counts(c, displs, "displacement");
    MPI_CHECK(MPI_Allgatherv(send, ic[c->rank], mpi_type(t), recv, ic, id, mpi_type(t), MPI_COMM_WORLD));
    free(ic);
    free(id);
}
#endif

/* One rank: every collective is a copy from send to recv. */
static void local_copy(CommType t, const void *send, int64_t soff, void *recv, int64_t roff, int64_t n) {
    size_t es = comm_type_size(t);
    if (n > 0 && (const char *)send + soff * es != (char *)recv + roff * es)
        memmove((char *)recv + roff * es, (const char *)send + soff * es, (size_t)n * es);
}

void comm_host_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                            const int64_t *displs) {
    if (c->world == 1) {
        local_copy(t, send, 0, recv, displs[0], counts[0]);
        return;
    }
#ifdef KVCPT_MPI
    mpi_all_gather_v(c, t, send, recv, counts, displs);
#endif
}

void comm_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                       const int64_t *displs) {
#ifdef KVCPT_NCCL
    if (c->backend == COMM_NCCL) {
        comm_nccl_all_gather_v(c->nccl, t, send, recv, counts, displs);
        return;
    }
#endif
    comm_host_all_gather_v(c, t, send, recv, counts, displs);
}

void comm_all_gather_v_start(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                             const int64_t *displs) {
    KV_CHECK(!c->pending, "comm: a background all-gather is already in flight");
#ifdef KVCPT_MPI
    if (c->backend == COMM_MPI && c->world > 1) {
        if (!c->req_counts) c->req_counts = xmalloc(sizeof(int) * 2 * (size_t)c->world);
        mpi_counts_into(c, counts, c->req_counts, "count");
        mpi_counts_into(c, displs, c->req_counts + c->world, "displacement");
        MPI_CHECK(MPI_Iallgatherv(send, c->req_counts[c->rank], mpi_type(t), recv, c->req_counts,
                                  c->req_counts + c->world, mpi_type(t), MPI_COMM_WORLD, &c->req));
        c->pending = 1;
        return;
    }
#endif
    /* single: a copy; nccl: already asynchronous on the communicator's stream */
    comm_all_gather_v(c, t, send, recv, counts, displs);
}

void comm_wait(Comm *c) {
    if (!c->pending) return;
#ifdef KVCPT_MPI
    MPI_CHECK(MPI_Wait(&c->req, MPI_STATUS_IGNORE));
#endif
    c->pending = 0;
}

void comm_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                       void *recv, const int64_t *rcounts, const int64_t *rdispls) {
#ifdef KVCPT_NCCL
    if (c->backend == COMM_NCCL) {
        comm_nccl_all_to_all_v(c->nccl, t, send, scounts, sdispls, recv, rcounts, rdispls);
        return;
    }
#endif
    if (c->world == 1) {
        KV_CHECK(scounts[0] == rcounts[0], "comm: all-to-all sends %lld elements but receives %lld",
                 (long long)scounts[0], (long long)rcounts[0]);
        local_copy(t, send, sdispls[0], recv, rdispls[0], scounts[0]);
        return;
    }
#ifdef KVCPT_MPI
    int *sc = mpi_counts(c, scounts, "send count"), *sd = mpi_counts(c, sdispls, "send displacement");
    int *rc = mpi_counts(c, rcounts, "receive count"), *rd = mpi_counts(c, rdispls, "receive displacement");
    MPI_CHECK(MPI_Alltoallv(send, sc, sd, mpi_type(t), recv, rc, rd, mpi_type(t), MPI_COMM_WORLD));
    free(sc), free(sd), free(rc), free(rd);
#endif
}

void comm_broadcast(Comm *c, CommType t, void *buf, int64_t count, int root) {
#ifdef KVCPT_NCCL
    if (c->backend == COMM_NCCL) {
        comm_nccl_broadcast(c->nccl, t, buf, count, root);
        return;
    }
#endif
    if (c->world == 1) return;
#ifdef KVCPT_MPI
    KV_CHECK(count >= 0 && count <= INT_MAX, "comm: broadcast of %lld elements exceeds MPI's int count",
             (long long)count);
    MPI_CHECK(MPI_Bcast(buf, (int)count, mpi_type(t), root, MPI_COMM_WORLD));
#endif
}

int64_t comm_max_i64(Comm *c, int64_t v) {
    if (c->world == 1) return v;
    int64_t out = v;
#ifdef KVCPT_MPI
    MPI_CHECK(MPI_Allreduce(&v, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD));
#endif
    return out;
}

void comm_barrier(Comm *c) {
    if (c->world == 1) return;
#ifdef KVCPT_MPI
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
#endif
}
