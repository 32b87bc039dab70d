#include "attn_impl.h"

#include <stdlib.h>
#include <string.h>

#include "../common/util.h"
#include "../kernels/attention.h"
#include "../kernels/attention_cudnn.h"

DecoderAttnImpl decoder_attn_impl_parse(const char *s, const char *what) {
    if (strcmp(s, "auto") == 0) return DECODER_ATTN_AUTO;
    if (strcmp(s, "mma") == 0) return DECODER_ATTN_MMA;
    if (strcmp(s, "cuda-core") == 0) return DECODER_ATTN_CUDA_CORE;
    if (strcmp(s, "cudnn") == 0) return DECODER_ATTN_CUDNN;
    die("%s: the attention implementation must be mma (tensor cores), cuda-core, cudnn (cuDNN's fused attention) "
        "or auto (got '%s')",
        what, s);
}

const char *decoder_attn_impl_name(DecoderAttnImpl a) {
    switch (a) {
        case DECODER_ATTN_AUTO: return "auto";
        case DECODER_ATTN_MMA: return "mma";
        case DECODER_ATTN_CUDA_CORE: return "cuda-core";
        case DECODER_ATTN_CUDNN: return "cudnn";
    }
    die("decoder_attn_impl_name: unknown attention implementation %d", (int)a);
}

DecoderAttnImpl decoder_attn_impl_asked(DecoderAttnImpl requested, const char **what) {
    decoder_attn_impl_name(requested); /* checks the value */
    if (requested != DECODER_ATTN_AUTO) return requested;
    const char *env = getenv(DECODER_ATTN_ENV);
    if (!env || !*env) return DECODER_ATTN_AUTO;
    if (what) *what = DECODER_ATTN_ENV;
    return decoder_attn_impl_parse(env, DECODER_ATTN_ENV);
}

DecoderAttnImpl decoder_attn_impl_resolve(DecoderAttnImpl requested, const char *what, int bf16, int64_t head_dim) {
    DecoderAttnImpl a = decoder_attn_impl_asked(requested, &what);
    const int tensor_cores = bf16 && attention_tensor_core_head_dim(head_dim);
    if (a == DECODER_ATTN_MMA && !tensor_cores) {
        if (!bf16)
            die("%s is mma, but the tensor-core attention kernels are the bf16 engine's (precision bf16 or bf16sr); "
                "precision fp32 runs the CUDA-core ones (cuda-core)",
                what);
        die("%s is mma, but the tensor-core attention kernels take head dims 16, 32, 64 and 128, not this model's "
            "%lld; use cuda-core",
            what, (long long)head_dim);
    }
    if (a == DECODER_ATTN_CUDNN) {
        if (!bf16)
            die("%s is cudnn, but cuDNN's fused attention runs in the bf16 engine (precision bf16 or bf16sr); "
                "precision fp32 runs cuda-core",
                what);
        const char *why = attention_cudnn_unsupported(head_dim, NULL);
        if (why) die("%s is cudnn, but %s", what, why);
    }
    if (a == DECODER_ATTN_AUTO) a = tensor_cores ? DECODER_ATTN_MMA : DECODER_ATTN_CUDA_CORE;
    return a;
}
