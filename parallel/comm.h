#ifndef KVCPT_COMM_H
#define KVCPT_COMM_H
/* The collectives sharding needs, behind one interface with three backends:
 * "single" (one process: the collectives are copies), "mpi" (CPU ranks
 * launched by mpirun) and "nccl" (GPU ranks; MPI only bootstraps), and
 * "device" (one GPU rank: copies on the device, parallel/comm_device.h). The
 * sharding code calls the same functions whatever the backend, so the CPU
 * path under `mpirun -np N` tests the exact protocol the GPU path runs.
 *
 * Buffers are host memory for single/mpi and device memory for nccl/device. Counts
 * and displacements are in elements of the given type. Every call is
 * collective: all ranks call it, in the same order. */
#include <stddef.h>
#include <stdint.h>

typedef enum { COMM_SINGLE = 0, COMM_MPI = 1, COMM_NCCL = 2, COMM_DEVICE = 3 } CommBackend;
typedef enum { COMM_F32 = 0, COMM_F64 = 1, COMM_I64 = 2, COMM_U8 = 3 } CommType;

typedef struct Comm Comm;

/* MPI is initialised only when this binary has it and the process was
 * started by a launcher (mpirun, srun: detected from their environment);
 * otherwise the single backend. want_nccl asks for NCCL on top of MPI (dies
 * when NCCL is not compiled in), on the device the caller has already
 * selected (cuda_device_select). */
Comm *comm_open(int want_nccl);
/* NCCL on top of an open MPI (or single) Comm, on the current device: for a
 * caller that needs comm_local_rank to pick its device (cuda_device_select)
 * before NCCL binds to one. comm_open(1) is comm_open(0) then this. */
void comm_use_nccl(Comm *c);
void comm_close(Comm *c);

int comm_rank(const Comm *c);
int comm_world(const Comm *c);
/* This rank among the ranks on its node (those that share memory, as
 * MPI_COMM_TYPE_SHARED groups them) and their number: which GPU a rank
 * takes (kernels/cuda_device.h). The single backend: 0 of 1. */
int comm_local_rank(const Comm *c);
int comm_local_world(const Comm *c);
/* A collective that has not finished after this many seconds ends the whole
 * job with a message instead of every rank waiting forever; 0 waits
 * forever. The default is PyTorch's for its CPU process groups: long enough
 * for a slow checkpoint or model load on one rank. The MPI collectives (the
 * CPU path and the control plane) name the ranks that never entered one (a
 * stopped or hung rank). NCCL's operations are watched by a thread per
 * communicator (parallel/nccl_watchdog.h): one not finished this long after
 * it was enqueued, or an asynchronous NCCL error, aborts the communicator
 * and ends the process naming the operation; applies to a communicator
 * already open and to one opened later. */
#define COMM_DEFAULT_TIMEOUT_TEXT "1800"
#define COMM_DEFAULT_TIMEOUT_S 1800.0
void comm_set_timeout(Comm *c, double seconds);
CommBackend comm_backend(const Comm *c);
const char *comm_backend_name(CommBackend b);
/* Which backends this binary carries ("single, mpi, nccl"), for --version. */
const char *comm_compiled_backends(void);
/* 1 when the environment says a launcher started this process. */
int comm_launched_by_mpi(void);
/* The number of ranks the launcher started, from its environment (no MPI
 * call, so usable before comm_open and in builds without MPI): 1 when not
 * launched; a lower bound when the launcher does not say (PMIx alone). */
int comm_launcher_world(void);
/* This process's rank from the launcher's environment (no MPI call): 0
 * when not launched or when the launcher does not say. */
int comm_launcher_rank(void);

size_t comm_type_size(CommType t);

/* recv[displs[r] .. + counts[r]) = rank r's send[0 .. counts[r]). */
void comm_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts, const int64_t *displs);
/* The same, started in the background (the next layer's prefetch): recv is
 * complete after comm_wait. At most one at a time per Comm; the arrays may
 * be reused once this returns. */
void comm_all_gather_v_start(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                             const int64_t *displs);
void comm_wait(Comm *c);
/* Rank r's send[sdispls[q] .. + scounts[q]) lands in rank q's
 * recv[rdispls[r] .. + rcounts[r]). */
void comm_all_to_all_v(Comm *c, CommType t, const void *send, const int64_t *scounts, const int64_t *sdispls,
                       void *recv, const int64_t *rcounts, const int64_t *rdispls);
/* The same on host memory whatever the backend (the control plane: losses,
 * flags, checkpoint file sizes); MPI carries it under nccl too. */
void comm_host_all_gather_v(Comm *c, CommType t, const void *send, void *recv, const int64_t *counts,
                            const int64_t *displs);
/* Maximum over ranks of one value (stop flags, "any rank saw a bad gradient"). */
int64_t comm_max_i64(Comm *c, int64_t v);
void comm_barrier(Comm *c);

#endif
