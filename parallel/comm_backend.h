#ifndef KVCPT_COMM_BACKEND_H
#define KVCPT_COMM_BACKEND_H
/* The backends behind parallel/comm.h, each a table: "single" (comm.c),
 * "mpi" (comm_mpi.c) and "nccl" (comm_nccl.c). A backend that was not
 * built registers no table (comm_mpi_stub.c, comm_nccl_stub.c, which the
 * Makefile links in their place). comm.c holds what every backend shares
 * and dispatches: host collectives to the single backend for one rank and
 * to mpi otherwise; the data collectives to nccl once it is on. Internal
 * to parallel/. */
#include "comm.h"

typedef struct CommOps {
    const char *name;
    /* Starts the backend on c: mpi sets c's rank, world and node-local
     * rank; nccl binds to the current device. Returns the backend's state
     * (Comm.host_state / Comm.data_state). */
    void *(*open)(Comm *c);
    /* Ends it (NULL: nothing to end); every rank calls it. */
    void (*close)(Comm *c);
    /* Takes a new c->timeout_s (NULL: reads it where it waits). */
    void (*set_timeout)(Comm *c, double seconds);
    void (*all_gather_v)(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                         const int64_t *displs);
    /* NULL: the backend has no background gather (the gather then runs at once). */
    void (*all_gather_v_start)(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                               const int64_t *displs);
    void (*wait)(Comm *c);
    void (*all_to_all_v)(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                         void *recv, const int64_t *rcounts, const int64_t *rdispls);
    int64_t (*max_i64)(Comm *c, int64_t v);
    void (*barrier)(Comm *c);
} CommOps;

struct Comm {
    CommBackend backend;
    int rank, world;
    int local_rank, local_world; /* among the ranks on this node (one shared-memory domain) */
    int pending;      /* a started all-gather not yet waited for */
    double timeout_s; /* a collective unfinished after this long ends the job; 0: wait forever */
    int64_t seq;      /* collectives entered so far (the same sequence on every rank) */
    const char *pending_what;
    const CommOps *host; /* the control plane and the CPU's collectives: single or mpi */
    void *host_state;
    const CommOps *data; /* the device buffers' collectives once NCCL is on; NULL: host's */
    void *data_state;
};

/* The mpi and nccl tables; NULL where that backend was not built. */
const CommOps *comm_mpi_ops(void);
const CommOps *comm_nccl_ops(void);
#endif
