#ifndef KVCPT_OPTIMIZER_H
#define KVCPT_OPTIMIZER_H
/* AdamW with fp32 states, or 8-bit block-wise quantized states as in
 * bitsandbytes (docs/optim.md). The optimizer steps a list of segments of a flat
 * parameter buffer (the model's tensors, or a rank's shard of them); each
 * segment is its own quantization unit: blocks of 256 start at the segment's
 * first element and never straddle segments, and a segment under 4096
 * elements keeps fp32 states. The step is bit-identical for any thread count. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "adamw_math.h"
#include "qmap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define OPTIM_BLOCK 256
#define OPTIM_MIN_8BIT_NUMEL 4096

typedef enum { OPTIM_ADAMW = 0, OPTIM_ADAMW8BIT = 1 } OptimKind;

typedef struct {
    double lr, beta1, beta2, eps, weight_decay;
    double grad_scale; /* gradients are multiplied by this (clipping); 1 = none */
} AdamWHyper;

typedef struct {
    int64_t offset, numel;  /* elements, into the params and grads buffers */
    int quantized;          /* 8-bit states, else fp32 */
    int64_t state_offset;   /* into m_code/v_code (quantized) or m32/v32 */
    int64_t absmax_offset;  /* index of the segment's first block absmax */
    int64_t first_block;    /* global index of its first 256-element block */
} OptimSegment;

/* Where a rejected step found its first unusable gradient. */
typedef struct {
    int segment;
    int64_t index;  /* within the segment */
    float value;
} OptimBadGrad;

typedef struct {
    OptimKind kind;
    int nseg;
    OptimSegment *seg;
    int64_t nblocks;            /* 256-element blocks over all segments */
    int64_t n_code, n_absmax;   /* quantized elements, quantized blocks */
    int64_t n_f32;              /* elements with fp32 states */
    uint8_t *m_code, *v_code;   /* a block whose absmax is 0 is all zeros */
    float *m_absmax, *v_absmax;
    float *m32, *v32;
    QuantMap map_m, map_v;      /* signed for m, unsigned for v */
    OptimBadGrad bad;           /* filled when a step is rejected */
} Optimizer;

/* The CPT defaults (docs/optim.md): lr 5e-6, betas 0.9/0.999, eps 1e-8, wd 0. */
AdamWHyper adamw_hyper_default(void);
const char *optim_kind_name(OptimKind k);
/* "adamw" or "adamw8bit"; returns -1 for anything else. */
int optim_kind_parse(const char *s, OptimKind *out);

/* Whether a segment of a tensor of tensor_numel elements gets 8-bit states
 * (the rule optim_create_pieces follows). */
int optim_segment_quantized(OptimKind kind, int64_t tensor_numel);
/* The state sizes optim_create_pieces would allocate for these segments,
 * counted without allocating (memory plans of large models). */
typedef struct {
    int64_t n_code, n_absmax, n_f32; /* quantized elements, quantized blocks, fp32-state elements */
} OptimStateCounts;
OptimStateCounts optim_state_counts(OptimKind kind, const int64_t *seg_numel, const int64_t *seg_tensor_numel,
                                    int nseg);
/* Device bytes of the GPU optimizer (optim/optim_cuda.h) for these counts and
 * nseg segments: what optim_cuda_create allocates, and optim_cuda_bytes says. */
#define OPTIM_DEV_SEGMENT_BYTES 64 /* one segment's device descriptor (optim/adamw8bit.cu asserts it) */
int64_t optim_device_bytes(const OptimStateCounts *n, int nseg);

/* Segments must have numel > 0, offset >= 0 and must not overlap. States
 * start at zero. Dies with a message on invalid segments. */
Optimizer *optim_create(OptimKind kind, const int64_t *seg_offset, const int64_t *seg_numel, int nseg);
/* The same for a rank's shard: seg_tensor_numel[i] is the element count of
 * the whole tensor segment i is a piece of, so a piece of a large tensor is
 * quantized exactly as it would be unsharded (NULL = the segments' own). */
Optimizer *optim_create_pieces(OptimKind kind, const int64_t *seg_offset, const int64_t *seg_numel,
                               const int64_t *seg_tensor_numel, int nseg);
void optim_free(Optimizer *o);

/* Bytes one step reads and writes: the gradient check's read, then params
 * read and written, grads read, states read and written (the bandwidth
 * benchmark's numerator). */
double optim_step_bytes(const Optimizer *o, int param_bytes, int grad_bytes);

/* One AdamW step (step is 1-based, for bias correction) over every segment:
 * params[seg.offset + i] with grads[seg.offset + i]. Returns 0; or, when a
 * gradient is non-finite (or its square overflows fp32), returns 1, fills
 * o->bad, prints a warning and changes neither params nor states. */
int optim_step(Optimizer *o, float *params, const float *grads, const AdamWHyper *h, int64_t step);
/* How a segment's updated parameters are stored, for models that keep
 * some tensors only in bf16: fp32 as computed, bf16 rounded to nearest
 * even, or bf16 rounded stochastically (adamw_round_bf16_sr). */
typedef enum { OPTIM_ROUND_NONE = 0, OPTIM_ROUND_NEAREST = 1, OPTIM_ROUND_STOCHASTIC = 2 } OptimRounding;
/* optim_step, then each segment's parameters rounded as round[s] says; the
 * random bits of element j of segment s are adamw_sr_bits(seed, step,
 * seg.offset + j). Parameters of rounded segments must hold bf16 values on
 * entry. The CPU oracle of optim_cuda_step_placed (optim/optim_cuda.h). */
int optim_step_rounded(Optimizer *o, float *params, const float *grads, const AdamWHyper *h, int64_t step,
                       const uint8_t *round, uint64_t seed);
/* Only the check optim_step starts with: 1 (and o->bad filled) when a
 * gradient is unusable. Ranks agree on skipping a step before any steps. */
int optim_check_grads(Optimizer *o, const float *grads, const AdamWHyper *h, int64_t step);

/* The per-step scalars both backends use (validates h and step, dies on
 * nonsense such as beta outside [0, 1) or step < 1). */
AdamWScalars adamw_scalars(const AdamWHyper *h, int64_t step);
/* Segment holding global block b (binary search over first_block). */
int optim_block_segment(const Optimizer *o, int64_t b);

/* States to/from an open stream (inside a checkpoint, say): magic, version,
 * kind and segment table are checked against o, sizes against the header,
 * and a checksum against the payload; path names the stream in errors. */
void optim_save(const Optimizer *o, FILE *f, const char *path);
void optim_load(Optimizer *o, FILE *f, const char *path);

#ifdef __cplusplus
}
#endif
#endif
