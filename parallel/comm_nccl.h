#ifndef KVCPT_COMM_NCCL_H
#define KVCPT_COMM_NCCL_H
/* The NCCL backend of parallel/comm.h (linked where NCCL was found; its
 * table, comm_nccl_ops, is in parallel/comm_backend.h): device
 * buffers, collectives on the communicator's own stream, the caller's
 * stream ordered before and after them with events. MPI broadcasts the
 * ncclUniqueId. Runs on the current device, which the caller picked
 * (cuda_device_select: one GPU per rank) before opening. */
#include <stdint.h>

#include "comm.h"

typedef struct CommNccl CommNccl;

CommNccl *comm_nccl_open(int rank, int world);
/* > 0: a watchdog thread ends the process when an operation has not
 * finished this many seconds after it was enqueued, or NCCL reports an
 * asynchronous error (parallel/nccl_watchdog.h); 0: not watched (the
 * default of a new communicator). Call between operations. */
void comm_nccl_set_timeout(CommNccl *n, double seconds);
/* Waits for the communicator's stream (watched), then ends it. */
void comm_nccl_close(CommNccl *n);
void comm_nccl_all_gather_v(CommNccl *n, CommType t, const void *send, void *recv, const int64_t *counts,
                            const int64_t *displs);
/* The same with the caller's stream left free: only comm_nccl_wait makes it
 * wait for the gather, so the compute enqueued between the two overlaps it
 * (a layer's prefetch). One at a time. */
void comm_nccl_all_gather_v_start(CommNccl *n, CommType t, const void *send, void *recv, const int64_t *counts,
                                  const int64_t *displs);
void comm_nccl_wait(CommNccl *n);
void comm_nccl_all_to_all_v(CommNccl *n, CommType t, const void *send, const int64_t *scounts,
                            const int64_t *sdispls, void *recv, const int64_t *rcounts, const int64_t *rdispls);

#endif
