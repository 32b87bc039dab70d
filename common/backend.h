#ifndef KVCPT_BACKEND_H
#define KVCPT_BACKEND_H
/* Which compute backends this binary carries and which one a run uses. */
typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } Device;

/* A compute backend beyond the CPU (always built), as it registers itself. */
typedef struct {
    const char *name;          /* "cuda" */
    const char *built_for;     /* what its kernels were compiled for, for --version */
    int (*device_count)(void); /* visible devices; 0 (never an error) without a driver or GPU */
} ComputeBackend;

/* The CUDA backend's table (kernels/cuda_backend.c), or NULL where the
 * binary was built without it: the Makefile then links
 * common/backend_cuda_stub.c in its place. */
const ComputeBackend *backend_cuda(void);

int backend_cuda_compiled(void);
/* Number of visible CUDA devices (0 when CUDA is not compiled or no driver). */
int backend_cuda_device_count(void);
/* "cpu", "cuda" or NULL (= auto: cuda when a GPU is visible). Dies on other strings. */
Device backend_resolve(const char *requested);
const char *backend_name(Device d);
/* One line per compiled backend, for --version. */
void backend_describe(void);
#endif
