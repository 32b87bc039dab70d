#ifndef KVCPT_BACKEND_H
#define KVCPT_BACKEND_H
/* The compute backends: one registry that every driver asks which backend a
 * run uses and, from its entry, what that backend does.
 *
 * The host (C11 + OpenMP + BLAS) is always there and needs no entry's
 * tables: each layer's own host path is the reference the others are
 * checked against. An accelerator registers one Backend (its folder's
 * backend.c, listed in backends/backends.c); where it was not built, a
 * stand-in registers its name with no tables, so --device NAME is refused
 * with a hint instead of being unknown.
 *
 * The registry lives here, in the lowest layer, because every layer that
 * picks a device (train, eval, bench, cli) reads it. A backend's seams are
 * each defined by the layer that calls them (eval/decode_device.h,
 * train/train_engine.h, bench/bench_backend.h) and held here as pointers
 * to those incomplete types, so this header includes nothing above it. */
#include <stddef.h>

/* What a resolved backend is: the host, or an accelerator with its own
 * memory (whose engines keep weights and activations there). */
typedef enum { BACKEND_HOST = 0, BACKEND_ACCEL = 1 } BackendKind;

struct DecodeDevice; /* eval/decode_device.h */
struct TrainDevice;  /* train/train_engine.h */
struct BenchHooks;   /* bench/bench_backend.h */

typedef struct Backend {
    const char *name;      /* what --device and config 'device' say: "cpu", "cuda" */
    const char *label;     /* how messages name it: "CUDA" */
    BackendKind kind;
    int compiled;          /* 0: registered by name only (not built into this binary) */
    const char *built_for; /* compiled: what its kernels target (--version); else why it is absent */
    const char *hint;      /* not compiled: how to build it */
    int (*device_count)(void); /* visible devices; 0 (never an error) without a driver or device */
    /* the seams; NULL on the host, whose layers run their own host paths */
    const struct TrainDevice *train;   /* the training engine */
    const struct DecodeDevice *decode; /* the eval command's decode engine */
    const struct BenchHooks *bench;    /* the benchmarks' timed device halves */
} Backend;

/* Adds b (NULL: nothing) to the registry; the program registers its
 * backends once, before any command (backends/backends.c). Dies on a
 * second entry of one name. */
void backend_register(const Backend *b);
/* Requested "cpu", a registered backend's name, or NULL/"auto" (the first
 * compiled accelerator with a visible device, else the host). Dies naming
 * --device on an unknown name, a backend this binary was built without
 * (with its hint), or one with no device visible. */
const Backend *backend_resolve(const char *requested);
/* 1 when name is "auto", "cpu" or a registered backend's (built or not):
 * what config 'device' may say. */
int backend_known(const char *name);
/* The names --device takes, for messages: "cpu or cuda". Returns buf. */
const char *backend_names(char *buf, size_t cap);
/* The first compiled accelerator with a visible device, for the commands
 * that only run on one (who: "bench ops"); dies as backend_resolve does,
 * naming who instead of --device. */
const Backend *backend_require_accel(const char *who);
/* One line per backend, for --version. */
void backend_describe(void);
#endif
