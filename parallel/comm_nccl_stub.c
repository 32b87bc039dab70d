/* Linked in place of parallel/comm_nccl.c and nccl_watchdog.c when NCCL is
 * not built (no CUDA, no nccl.h or no MPI): no nccl backend to register
 * (comm_use_nccl refuses by name). */
#include "comm_backend.h"

#include <stddef.h>

const CommOps *comm_nccl_ops(void) { return NULL; }
