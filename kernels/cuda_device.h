#ifndef KVCPT_CUDA_DEVICE_H
#define KVCPT_CUDA_DEVICE_H
/* Device discovery and host<->device copies, callable from C. */
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/* Visible devices; 0 (never an error) when no driver or GPU is present. */
int cuda_device_count(void);
/* One GPU per rank: makes device local_rank (this rank's index among the
 * local_world ranks of its node) the current one, before anything else in
 * the process touches CUDA, and prints one line naming rank, local rank,
 * device, its name and PCI bus id. Dies, with the numbers, when the node has
 * more ranks than visible devices, unless share (testing, or small models)
 * lets ranks share them round-robin (local_rank % devices). Returns the
 * device index. what names the caller in messages ("train"). */
int cuda_device_select(const char *what, int rank, int local_rank, int local_world, int share);
/* Name, memory and HBM bandwidth of the current device into buf. */
void cuda_device_describe(char *buf, size_t n);
double cuda_device_hbm_gbps(void);
void *cuda_malloc(size_t bytes);
/* cuda_malloc that adds bytes to *counter: engines report what they hold exactly. */
void *cuda_malloc_counted(int64_t *counter, int64_t bytes);
void cuda_free(void *p);
void cuda_memcpy_h2d(void *dst, const void *src, size_t bytes);
void cuda_memcpy_d2h(void *dst, const void *src, size_t bytes);
/* Bytes cuda_memcpy_h2d and cuda_memcpy_d2h have moved so far (every
 * host<->device copy of the engines goes through them). */
void cuda_transfer_bytes(int64_t *h2d, int64_t *d2h);
void cuda_memcpy_d2d(void *dst, const void *src, size_t bytes);
void cuda_memset_zero(void *dst, size_t bytes);
/* Page-locks host memory (a checkpoint's staging), so copies to and from it
 * run at the bus's speed; unpin before freeing it. Zero bytes: nothing. */
void cuda_host_pin(void *p, size_t bytes);
void cuda_host_unpin(void *p);
void cuda_synchronize(void);
/* Free and total device memory now. */
void cuda_memory_info(int64_t *free_bytes, int64_t *total_bytes);
#ifdef __cplusplus
}
#endif
#endif
