#ifndef KVCPT_NCCL_WATCHDOG_H
#define KVCPT_NCCL_WATCHDOG_H
/* A watchdog for one NCCL communicator (linked where NCCL was found), as
 * PyTorch's ProcessGroupNCCL has one: on a GPU, an NCCL operation whose peer
 * is stopped, hung or dead spins forever, and so would every rank waiting on
 * it. The caller brackets each operation it enqueues with enter/leave; leave
 * records an event after it on the NCCL stream (no host synchronisation).
 * A thread polls the oldest unfinished operation and the communicator's
 * asynchronous error: an operation not finished `timeout_s` after it was
 * enqueued (the host still inside the NCCL call counts as unfinished), or an
 * asynchronous error, prints one line naming the operation, this rank and the
 * seconds waited, calls ncclCommAbort and ends the process with status 1 (as
 * comm.c's MPI watchdog does; mpirun then ends the other ranks).
 *
 * The time counts from enqueueing, so it includes the compute queued before
 * the operation on the device: the timeout must exceed the longest stretch of
 * GPU work between two collectives (comm_timeout's default, 1800 s, does). */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdint.h>

typedef struct NcclWatchdog NcclWatchdog;

/* Starts the thread for comm, which belongs to `device` (the thread queries
 * events there). timeout_s > 0. */
NcclWatchdog *nccl_watchdog_start(ncclComm_t comm, int rank, int world, int device, double timeout_s);
/* Stops and joins the thread (NULL: nothing). Call between operations: those
 * still in flight are no longer watched. */
void nccl_watchdog_stop(NcclWatchdog *w);
/* Before the NCCL calls of one operation (`what`: a string that outlives the
 * watchdog): its ticket for nccl_watchdog_leave. Waits for the oldest watched
 * operation to finish only when a whole ring of them is in flight. */
int64_t nccl_watchdog_enter(NcclWatchdog *w, const char *what);
/* After them: the operation is finished when the work now on `stream` is. */
void nccl_watchdog_leave(NcclWatchdog *w, int64_t ticket, cudaStream_t stream);

#endif
