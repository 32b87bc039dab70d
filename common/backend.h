#ifndef KVCPT_BACKEND_H
#define KVCPT_BACKEND_H
/* Which compute backends this binary carries and which one a run uses. */
typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } Device;

int backend_cuda_compiled(void);
/* Number of visible CUDA devices (0 when CUDA is not compiled or no driver). */
int backend_cuda_device_count(void);
/* "cpu", "cuda" or NULL (= auto: cuda when a GPU is visible). Dies on other strings. */
Device backend_resolve(const char *requested);
const char *backend_name(Device d);
/* One line per compiled backend, for --version. */
void backend_describe(void);
#endif
