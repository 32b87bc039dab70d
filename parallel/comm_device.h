#ifndef KVCPT_COMM_DEVICE_H
#define KVCPT_COMM_DEVICE_H
/* The collectives on device buffers that a sharded CUDA step needs
 * (parallel/fsdp_cuda.h), opened on the device the caller has selected:
 * NCCL for several ranks; for one rank, copies on the GPU (every collective
 * of one rank is a copy), so a single-GPU run never needs NCCL, and a
 * binary built without it trains with the master and optimizer on the GPU
 * too. Linked only in builds with the CUDA backend. */
#include "comm.h"

/* Opens them on c unless open already (comm_backend is then COMM_NCCL or
 * COMM_DEVICE). */
void comm_use_device(Comm *c);

#endif
