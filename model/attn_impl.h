#ifndef KVCPT_ATTN_IMPL_H
#define KVCPT_ATTN_IMPL_H
/* Which kernels the CUDA training engine's attention runs on. The bf16
 * engine has two sets: the tensor-core (mma.sync) kernels of
 * kernels/attention_mma.h for head dims 16, 32, 64 and 128, and the
 * CUDA-core kernels the fp32 engine runs, reading its bf16 activations
 * (kernels/attention.h, *_bf16_cuda), for every head dim. The second is a
 * fallback for a card or toolkit on which the first misbehaves, chosen
 * without a rebuild: the KVCPT_ATTN environment variable, or the training
 * config key attn_impl (which wins when it is not auto). Parsed, named and
 * resolved here only, so the engine, the trainer and `kvcpt bench
 * attention` agree. A third, cuDNN's fused attention (cudnn), runs only
 * when named. */
#include <stdint.h>

#define DECODER_ATTN_ENV "KVCPT_ATTN"

typedef enum {
    /* nothing asked for: KVCPT_ATTN when it is set, else tensor cores where
     * the engine and head dim take them, CUDA cores otherwise */
    DECODER_ATTN_AUTO = 0,
    DECODER_ATTN_MMA = 1,       /* tensor cores; refused where they cannot run */
    DECODER_ATTN_CUDA_CORE = 2, /* the CUDA-core kernels */
    DECODER_ATTN_CUDNN = 3,     /* cuDNN's fused SDPA (kernels/attention_cudnn.h); only when asked for */
} DecoderAttnImpl;

/* "auto" | "mma" | "cuda-core" | "cudnn"; dies naming what (a variable,
 * flag or config key, as the user wrote it) otherwise. */
DecoderAttnImpl decoder_attn_impl_parse(const char *s, const char *what);
/* "auto", "mma", "cuda-core" or "cudnn". */
const char *decoder_attn_impl_name(DecoderAttnImpl a);
/* What was asked for: requested when it is not auto, else $KVCPT_ATTN when
 * set and not empty (*what, when not NULL, then names the variable), else
 * auto. The memory plan sizes a run by it without resolving (a build
 * without cuDNN still plans a cudnn run). */
DecoderAttnImpl decoder_attn_impl_asked(DecoderAttnImpl requested, const char **what);
/* What runs, never auto: requested (from what, e.g. "config 'attn_impl'")
 * when it is not auto, else $KVCPT_ATTN when set and not empty, else auto;
 * auto becomes mma when bf16 and head_dim allow it, else cuda-core (never
 * cudnn: it waits for a card to validate it, docs/cuda.md). mma on an
 * engine without tensor-core attention (fp32, or a head dim outside 16,
 * 32, 64, 128), or cudnn on fp32, a build without cuDNN or a head dim it
 * does not take, dies naming where it was asked for. */
DecoderAttnImpl decoder_attn_impl_resolve(DecoderAttnImpl requested, const char *what, int bf16, int64_t head_dim);
#endif
