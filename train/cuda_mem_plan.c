#include "cuda_mem_plan.h"

#include "../common/util.h"
#include "../kernels/attention_cuda_size.h"
#include "../kernels/attention_cudnn_size.h"
#include "../kernels/matmul.h"
#include "../model/decoder.h"
#include "../parallel/fsdp_cuda.h"
#include "../parallel/shard_plan.h"

/* The device optimizer of one rank: the world-of-one shard plan's segments,
 * as the trainer hands them to it (parallel/shard_ckpt.c's optimizer). */
static int64_t optim_bytes(const ParamLayout *pl, OptimKind kind) {
    ShardPlan sp;
    shard_plan_build(&sp, pl, 1, 0);
    int64_t b = fsdp_cuda_optim_bytes(&sp, kind);
    shard_plan_free(&sp);
    return b;
}

static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* See CudaMemPlan.workspace: what the kernel launchers allocate themselves. */
static int64_t workspace_bytes(const DecoderConfig *c, const CudaMemInputs *in, int64_t cudnn_workspace) {
    int64_t B = in->micro_batch, T = in->T, BT = B * T, Hq = c->num_attention_heads, Hkv = c->num_key_value_heads;
    int64_t C = c->hidden_size;
    int64_t chunk = BT < DECODER_CUDA_CE_CHUNK_ROWS ? BT : DECODER_CUDA_CE_CHUNK_ROWS;
    int64_t b = MATMUL_CUDA_WORKSPACE_BYTES;
    if (in->precision == DECODER_CUDA_BF16_WEIGHTS) {
        /* kernels/matmul.cu's cast slots: A takes the fp32 output gradient
         * the output and down projections' backward round (BT x C) or a
         * logits chunk's (the lm_head's backward), B the lm_head's fp32
         * input chunk (the final norm's output); every other product reads
         * bf16 activations as they are */
        b += (int64_t)sizeof(uint16_t) * (max64(BT * C, chunk * c->vocab_size) + chunk * C);
    }
    /* the attention's own temporaries, as its launchers size them; cuDNN's
     * workspace is kept (grown to the largest plan's), the selection's
     * scratch comes and goes beside it */
    const RefreshMask *m = &in->mask;
    int64_t attn = attention_cuda_select_scratch_bytes(m, B, T, Hq, Hkv);
    b += cudnn_workspace;
    if (cudnn_workspace == 0)
        attn = max64(attn, max64(attention_cuda_forward_scratch_bytes(m, B, T, Hq, Hkv, c->head_dim),
                                 attention_cuda_backward_scratch_bytes(m, B, T, Hq, Hkv, c->head_dim,
                                                                       attention_bwd_variant_default())));
    int64_t embed_rows = (int64_t)sizeof(int32_t) * 3 * BT;
    return b + max64(attn, embed_rows);
}

CudaMemPlan cuda_mem_plan(const DecoderConfig *c, const CudaMemInputs *in) {
    KV_CHECK(in->micro_batch >= 1 && in->T >= 1, "cuda memory plan: need micro_batch >= 1 and T >= 1 (got %lld, %lld)",
             (long long)in->micro_batch, (long long)in->T);
    ParamLayout pl;
    param_layout_build(&pl, c);
    CudaMemPlan p = {0};
    /* a streamed engine holds its resident tensors and slots only */
    DecoderCudaFixedBytes fb = in->streamed ? decoder_cuda_streamed_bytes(&pl, c, in->precision)
                                            : decoder_cuda_fixed_bytes(&pl, c, in->precision);
    p.params = fb.params, p.wbf16 = fb.wbf16, p.grads = fb.grads;
    p.rope = decoder_cuda_rope_bytes(c, in->T);
    DecoderCudaActBytes ab = decoder_cuda_act_bytes(c, in->recompute, in->precision, in->micro_batch, in->T, &in->mask);
    p.acts = decoder_cuda_act_total(c, &ab);
    p.attn = decoder_cuda_attn_scratch_bytes(c, in->precision, in->attn, in->micro_batch, in->T, &in->mask);
    p.optim = in->optim_device ? optim_bytes(&pl, in->optim) : 0;
    /* the last rank's pieces absorb the rounding of every cut: the largest shard */
    if (in->ranks > 0) {
        ShardPlan sp;
        shard_plan_build(&sp, &pl, in->ranks, in->ranks - 1);
        p.shards = fsdp_cuda_bytes(&sp, in->precision == DECODER_CUDA_BF16_WEIGHTS, in->optim).total;
        shard_plan_free(&sp);
    }
    p.counted = p.params + p.wbf16 + p.grads + p.rope + p.acts + p.attn + p.optim + p.shards;
    p.cudnn_workspace = p.attn > 0 ? ATTN_CUDNN_WORKSPACE_CAP : 0;
    p.workspace = workspace_bytes(c, in, p.cudnn_workspace);
    p.total = p.counted + p.workspace;
    param_layout_free(&pl);
    return p;
}

CudaMemInputs cuda_mem_inputs_from_train(const TrainConfig *c, TrainMode mode, int ranks) {
    OptimKind kind;
    KV_CHECK(optim_kind_parse(c->optim, &kind) == 0, "config: unknown optimizer '%s'", c->optim);
    int whole = train_mode_whole_on_device(mode);
    CudaMemInputs in = {train_mode_precision(mode),
                        (DecoderRecompute)c->recompute,
                        whole,
                        kind,
                        c->micro_batch,
                        c->L + c->S,
                        train_config_mask(c),
                        whole ? 0 : ranks,
                        !whole && c->reshard_after_forward,
                        decoder_attn_impl_asked((DecoderAttnImpl)c->attn_impl, NULL)};
    return in;
}

void cuda_mem_plan_print(FILE *f, const CudaMemPlan *p, const char *indent) {
    const char *names[] = {"parameters (fp32)",     "weights (bf16)",
                           "gradients (fp32)",      "rope tables",
                           "activations",           "attention scratch (cudnn)",
                           "optimizer states",      "shards (master, grads, states)",
                           "workspace (uncounted)", "total"};
    const int64_t v[] = {p->params, p->wbf16, p->grads,  p->rope,      p->acts,
                         p->attn,   p->optim, p->shards, p->workspace, p->total};
    for (int i = 0; i < 10; i++) {
        if (v[i] == 0 && i == 5) continue; /* the line only where attn cudnn holds one */
        fprintf(f, "%s%-30s %9.2f GiB  (%lld bytes)\n", indent, names[i], (double)v[i] / (1024.0 * 1024.0 * 1024.0),
                (long long)v[i]);
        if (i == 8 && p->cudnn_workspace > 0)
            fprintf(f,
                    "%s  of which cuDNN's workspace, at its cap (ATTN_CUDNN_WORKSPACE_CAP): %.2f GiB  (%lld bytes)\n",
                    indent, (double)p->cudnn_workspace / (1024.0 * 1024.0 * 1024.0), (long long)p->cudnn_workspace);
    }
}
