/* The memory plan (train/cuda_mem_plan.h) against the CUDA engine it
 * predicts: for several configurations (fp32 / bf16 weights, recompute
 * none, attn and full, the optimizer on the engine's parameters or on one rank's
 * device shards over a world-of-one NCCL communicator, the RefreshKV mask
 * on and off, with and without the per-row records of evict and restride,
 * T and micro-batch), the bytes the engine counts
 * (decoder_cuda_bytes + device_optim_bytes or fsdp_cuda_device_bytes) after
 * setup and after a forward
 * and backward equal the plan's within 2%, and exactly: the plan adds up
 * the engine's own size functions, so any buffer it forgets or invents
 * shows as a difference. Under the emulator the device bytes in use
 * (cudaMemGetInfo: size minus live blocks) are checked the same way, which
 * also catches an allocation the engine does not count. The uncounted
 * workspace (cuBLASLt, bf16 casts, per-launch temporaries) is not compared:
 * the emulator's matmuls allocate none. A mask set after a causal forward
 * grows the selections alone, to the plan's bytes. The ZeRO-3 budget
 * (train/zero3_plan.h, `kvcpt plan --engine zero3`) is held to the same
 * engine: its activations (with the RoPE tables) are what each case's first
 * forward adds, at the case's activation size, recompute and mask, and its
 * optimizer row for 1 and 2 ranks is the largest rank's device optimizer as
 * optim_cuda_create allocates it (emulated device bytes under the
 * emulator).
 *
 * attn cudnn (the bf16 engine, mask on and off, S below and above L): the
 * engine holds the region cuDNN's calls carve (attention_cudnn_size.h), the
 * plan's attn line, exactly; the only emulated device bytes beyond the
 * plan's counted ones are cuDNN's workspace, at most the cap the plan's
 * workspace counts. The same plan without cudnn's region (attn auto) must
 * miss the engine's bytes, and a graph whose workspace exceeds the cap is
 * refused by the probe, naming the cap. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../testlib.h"

#ifdef KVCPT_CUDA
#include "../../kernels/attention_cudnn.h"
#include "../../kernels/attention_cudnn_size.h"
#include "../../kernels/cuda_device.h"
#include "../../model/decoder_cuda.h"
#include "../../optim/optim_cuda.h"
#include "../../parallel/comm_device.h"
#include "../../parallel/fsdp_cuda.h"
#include "../../parallel/shard_ckpt.h"
#include "../../train/cuda_mem_plan.h"
#include "../../train/device_optim.h"
#include "../../train/zero3_plan.h"

typedef struct {
    const char *label;
    int tied;
    DecoderCudaPrecision precision;
    DecoderRecompute recompute;
    int optim_device; /* 0: sharded (fsdp_cuda.h), one rank */
    int64_t B, T;
    RefreshMask mask; /* enabled = 0: causal */
    DecoderAttnImpl attn; /* auto: the engine's default kernels */
} Case;

static void make_config_vocab(DecoderConfig *c, int tied, int vocab) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"vocab_size\":%d,\"hidden_size\":32,\"intermediate_size\":40,\"num_hidden_layers\":2,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":1,\"head_dim\":8,\"rms_norm_eps\":1e-5,"
             "\"rope_theta\":500000.0,\"max_position_embeddings\":4096,\"tie_word_embeddings\":%s,"
             "\"initializer_range\":0.1}",
             vocab, tied ? "true" : "false");
    config_parse_json(c, json, "mem plan test");
}

static void make_config(DecoderConfig *c, int tied) { make_config_vocab(c, tied, 96); }

#ifdef KVCPT_CUDA_EMU
static int64_t device_used(void) {
    int64_t free_b = 0, total_b = 0;
    cuda_memory_info(&free_b, &total_b);
    return total_b - free_b;
}
#endif

/* got against want: within 2% (the ratio printed) and exactly. */
static void compare(const char *label, const char *when, int64_t got, int64_t want) {
    double ratio = (double)got / (double)want;
    char name[256];
    snprintf(name, sizeof name, "%s: %s: %lld bytes, plan %lld (measured/plan %.6f) within 2%%", label, when,
             (long long)got, (long long)want, ratio);
    tl_result(ratio >= 0.98 && ratio <= 1.02, name, "off by %.2f%%", (ratio - 1.0) * 100.0);
    snprintf(name, sizeof name, "%s: %s: exactly the plan's bytes", label, when);
    tl_result(got == want, name, "%lld bytes measured, %lld planned (difference %lld)", (long long)got, (long long)want,
              (long long)(got - want));
}

/* The parameters and the batch every case runs: deterministic values. */
static float *test_params(int64_t n) {
    float *host = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) host[i] = 0.01f * (float)((i * 7919) % 201 - 100);
    return host;
}

static void test_batch(int32_t **tokens, int32_t **targets, int64_t BT, int64_t vocab) {
    *tokens = malloc(sizeof(int32_t) * (size_t)BT);
    *targets = malloc(sizeof(int32_t) * (size_t)BT);
    for (int64_t i = 0; i < BT; i++) {
        (*tokens)[i] = (int32_t)((i * 31 + 7) % vocab);
        (*targets)[i] = (int32_t)((i * 17 + 3) % vocab);
    }
}

static void run_case(const Case *k) {
    DecoderConfig c;
    make_config(&c, k->tied);
    CudaMemInputs in = {k->precision, k->recompute, k->optim_device,         OPTIM_ADAMW8BIT,  k->B,
                        k->T,         k->mask,      k->optim_device ? 0 : 1, !k->optim_device, k->attn};
    CudaMemPlan p = cuda_mem_plan(&c, &in);
    const int cudnn = k->attn == DECODER_ATTN_CUDNN;
    if (cudnn) attention_cudnn_release(); /* the workspace an earlier case left */
#ifdef KVCPT_CUDA_EMU
    int64_t used0 = device_used();
#endif

    DecoderCuda g;
    if (k->optim_device) decoder_cuda_create(&g, &c, k->recompute, k->precision);
    else decoder_cuda_create_streamed(&g, &c, k->recompute, k->precision);
    if (k->attn != DECODER_ATTN_AUTO) decoder_cuda_set_attn(&g, k->attn, "mem plan test");
    if (k->mask.enabled) decoder_cuda_set_mask(&g, &k->mask);
    ParamLayout pl;
    param_layout_build(&pl, &c);
    float *host = test_params(pl.total);
    ShardPlan sp;
    Optimizer *opt = NULL;
    DeviceOptim *d = NULL;
    Comm *comm = NULL;
    Decoder host_model;
    Fsdp fsdp;
    FsdpCuda *shards = NULL;
    if (k->optim_device) {
        shard_plan_build(&sp, &pl, 1, 0);
        opt = shard_optimizer_create(OPTIM_ADAMW8BIT, &sp, 0);
        decoder_cuda_upload_params(&g, host);
        d = device_optim_create(&g, opt, &sp, k->precision == DECODER_CUDA_BF16_WEIGHTS, 5);
        device_optim_push(d, &g, host, opt);
    } else {
        comm = comm_open(0);
        comm_use_device(comm);
        decoder_create(&host_model, &c);
        fsdp_init(&fsdp, comm, &host_model, 1);
        opt = shard_optimizer_create(OPTIM_ADAMW8BIT, &fsdp.plan, 0);
        shards = fsdp_cuda_create(&fsdp, &g, opt);
        fsdp_cuda_push(shards, host, opt);
    }
#define ENGINE_BYTES()                                                                                                 \
    (decoder_cuda_bytes(&g) + (d ? device_optim_bytes(d) : 0) + (shards ? fsdp_cuda_device_bytes(shards) : 0))
    /* rope and activations come with the first forward */
    int64_t setup_plan = p.params + p.wbf16 + p.grads + p.optim + p.shards;
    int64_t counted = ENGINE_BYTES(), at_setup = counted;
#ifdef KVCPT_CUDA_EMU
    int64_t used_setup = device_used();
#endif
    compare(k->label, "counted after setup", counted, setup_plan);
#ifdef KVCPT_CUDA_EMU
    compare(k->label, "emulated device bytes after setup", device_used() - used0, setup_plan);
#endif

    int32_t *tokens, *targets;
    test_batch(&tokens, &targets, k->B * k->T, c.vocab_size);
    decoder_cuda_forward(&g, tokens, targets, k->B, k->T);
    decoder_cuda_zero_grad(&g);
    decoder_cuda_backward(&g);
    counted = ENGINE_BYTES();
    compare(k->label, "counted after forward+backward (peak)", counted, p.counted);
#ifdef KVCPT_CUDA_EMU
    /* cuDNN's workspace is kept beside the counted bytes, within its cap */
    const int64_t ws = attention_cudnn_workspace_bytes();
    compare(k->label, "emulated device bytes after forward+backward (less cuDNN's workspace)",
            device_used() - used0 - ws, p.counted);
#endif
    if (cudnn) {
        compare(k->label, "attn cudnn's region: the engine's vs the plan's attn line", g.bytes_attn, p.attn);
        char name[256];
        snprintf(name, sizeof name,
                 "%s: cuDNN's workspace (%lld bytes) is held, within the %lld-byte cap the plan's "
                 "workspace counts",
                 k->label, (long long)attention_cudnn_workspace_bytes(), (long long)p.cudnn_workspace);
        tl_result(attention_cudnn_workspace_bytes() > 0 && attention_cudnn_workspace_bytes() <= p.cudnn_workspace &&
                      p.cudnn_workspace == ATTN_CUDNN_WORKSPACE_CAP && p.workspace >= p.cudnn_workspace,
                  name, "workspace plan %lld of %lld", (long long)p.cudnn_workspace, (long long)p.workspace);
        /* the plan without the region cannot match: the comparisons above can fail */
        CudaMemInputs without = in;
        without.attn = DECODER_ATTN_AUTO;
        snprintf(name, sizeof name, "%s: a plan leaving out cudnn's region (%lld bytes) misses the engine's bytes",
                 k->label, (long long)p.attn);
        tl_result(p.attn > 0 && cuda_mem_plan(&c, &without).counted != counted, name, "matched anyway");
    } else {
        char name[256];
        snprintf(name, sizeof name, "%s: no cudnn region without attn cudnn", k->label);
        tl_result(g.bytes_attn == 0 && p.attn == 0, name, "engine %lld, plan %lld", (long long)g.bytes_attn,
                  (long long)p.attn);
    }
    /* the ZeRO-3 budget's activations: this engine's first forward, RoPE tables included */
    PlanInputs zin = {.seq = k->T,
                      .micro_batch = k->B,
                      .mask = k->mask,
                      .param_bytes = 2,
                      .grad_bytes = 4,
                      .act_bytes = decoder_cuda_act_size(k->precision),
                      .optim = OPTIM_ADAMW8BIT,
                      .recompute = k->recompute};
    int64_t zero3_acts = plan_rank_bytes(&c, &zin, 1).activations;
    /* the budget sizes the default attention: cudnn's region (and workspace) beside it */
    compare(k->label, "ZeRO-3 budget's activations vs what the first forward counted",
            counted - at_setup - g.bytes_attn, zero3_acts);
#ifdef KVCPT_CUDA_EMU
    compare(k->label, "ZeRO-3 budget's activations vs the emulated bytes of the first forward",
            device_used() - used_setup - g.bytes_attn - ws, zero3_acts);
#endif
    /* the engine's own peak is the plan's only at the planned shape: a
     * smaller forward reuses the buffers, a longer one would not fit it */
    decoder_cuda_forward(&g, tokens, targets, 1, k->T);
    tl_result(ENGINE_BYTES() == counted, "a smaller forward after the planned one allocates nothing more", "grew");
#undef ENGINE_BYTES

    if (d) {
        device_optim_free(d);
        shard_plan_free(&sp);
    }
    if (shards) {
        fsdp_cuda_free(shards, &g);
        fsdp_free(&fsdp, &host_model);
        decoder_free(&host_model);
        comm_close(comm);
    }
    optim_free(opt);
    decoder_cuda_free(&g);
    if (cudnn) attention_cudnn_release();
    free(host);
    free(tokens);
    free(targets);
    param_layout_free(&pl);
}

#ifdef KVCPT_CUDA_EMU
/* A cuDNN plan wanting more workspace than the cap the memory plan counts
 * is refused at the probe, naming the cap; at the cap it is taken. */
static void run_cudnn_workspace_cap(void) {
    const RefreshMask none = refresh_mask_off();
    char want[64];
    attention_cudnn_release(); /* no cached plan answers for the shapes below */
    snprintf(want, sizeof want, "%lld", (long long)ATTN_CUDNN_WORKSPACE_CAP + 1);
    setenv("KVCPT_EMU_CUDNN_WORKSPACE", want, 1);
    const char *why = attention_cudnn_probe(1, 16, 2, 1, 8, &none);
    tl_result(why && strstr(why, "over the 134217728-byte cap") && strstr(why, "ATTN_CUDNN_WORKSPACE_CAP"),
              "attn cudnn: a plan wanting a workspace over the cap is refused at the probe, naming the cap", "%s",
              why ? why : "accepted");
    attention_cudnn_release();
    snprintf(want, sizeof want, "%lld", (long long)ATTN_CUDNN_WORKSPACE_CAP);
    setenv("KVCPT_EMU_CUDNN_WORKSPACE", want, 1);
    why = attention_cudnn_probe(1, 16, 2, 1, 8, &none);
    tl_result(!why, "attn cudnn: a plan wanting the cap's workspace exactly is taken", "%s", why ? why : "");
    attention_cudnn_release();
    unsetenv("KVCPT_EMU_CUDNN_WORKSPACE");
}
#endif

/* The ZeRO-3 budget's optimizer row for ranks ranks: the largest of the
 * device optimizers the ranks' segments get (a piece of a large tensor is
 * quantized as the whole; vocab 300 makes the embedding and lm_head 8-bit
 * and their pieces uneven). */
static void run_zero3_optim(OptimKind kind, int ranks) {
    DecoderConfig c;
    make_config_vocab(&c, 0, 300);
    ParamLayout pl;
    param_layout_build(&pl, &c);
    PlanInputs zin = {.seq = 33,
                      .micro_batch = 1,
                      .mask = refresh_mask_off(),
                      .param_bytes = 2,
                      .grad_bytes = 4,
                      .act_bytes = 2,
                      .optim = kind,
                      .recompute = DECODER_RECOMPUTE_NONE};
    int64_t want = plan_rank_bytes(&c, &zin, ranks).optim, largest = 0;
    for (int r = 0; r < ranks; r++) {
        ShardPlan sp;
        shard_plan_build(&sp, &pl, ranks, r);
        Optimizer *host = shard_optimizer_create(kind, &sp, r);
#ifdef KVCPT_CUDA_EMU
        int64_t used0 = device_used();
#endif
        OptimCuda *o = optim_cuda_create(host);
#ifdef KVCPT_CUDA_EMU
        int64_t held = device_used() - used0; /* what the emulator handed out */
#else
        int64_t held = optim_cuda_bytes(o);
#endif
        if (held > largest) largest = held;
        optim_cuda_free(o);
        optim_free(host);
        shard_plan_free(&sp);
    }
    char label[128];
    snprintf(label, sizeof label, "ZeRO-3 %s optimizer, %d rank%s", kind == OPTIM_ADAMW8BIT ? "adamw8bit" : "adamw",
             ranks, ranks > 1 ? "s" : "");
    compare(label, "the largest rank's device optimizer", largest, want);
    param_layout_free(&pl);
}

/* The mask set on an engine that already ran a causal forward of the same
 * shape: the next forward grows only the selections, to the plan's bytes
 * for the masked run (the per-row records need more than B * T * Hkv). */
static void run_mask_after_forward(const char *label) {
    DecoderConfig c;
    make_config(&c, 0);
    const int64_t B = 2, T = 49, BT = B * T;
    const RefreshMask m = {
        .enabled = 1, .L = 40, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 3, .S = T - 40};
    CudaMemInputs in = {DECODER_CUDA_FP32, DECODER_RECOMPUTE_NONE, 0, OPTIM_ADAMW8BIT, B, T, m, 0, 0,
                        DECODER_ATTN_AUTO};
    CudaMemPlan p = cuda_mem_plan(&c, &in);
    DecoderCuda g;
    decoder_cuda_create(&g, &c, DECODER_RECOMPUTE_NONE, DECODER_CUDA_FP32);
    ParamLayout pl;
    param_layout_build(&pl, &c);
    float *host = test_params(pl.total);
    decoder_cuda_upload_params(&g, host);
    int32_t *tokens, *targets;
    test_batch(&tokens, &targets, BT, c.vocab_size);
    decoder_cuda_forward(&g, tokens, targets, B, T);
    int64_t causal = decoder_cuda_bytes(&g);
    decoder_cuda_set_mask(&g, &m);
    decoder_cuda_forward(&g, tokens, targets, B, T);
    decoder_cuda_zero_grad(&g);
    decoder_cuda_backward(&g);
    int64_t grown = decoder_cuda_bytes(&g) - causal;
    int64_t want =
        c.num_hidden_layers * ((int64_t)sizeof(int32_t) * B * c.num_key_value_heads * refresh_sel_len(&m, T) -
                               (int64_t)sizeof(int32_t) * BT * c.num_key_value_heads);
    char name[256];
    snprintf(name, sizeof name, "%s: the selections grew by %lld bytes, every layer's to B * Hkv * refresh_sel_len",
             label, (long long)grown);
    tl_result(grown == want && want > 0, name, "grew %lld, expected %lld", (long long)grown, (long long)want);
    compare(label, "counted after the masked forward+backward", decoder_cuda_bytes(&g), p.counted);
    decoder_cuda_free(&g);
    free(host);
    free(tokens);
    free(targets);
    param_layout_free(&pl);
}
#endif

int main(void) {
#ifdef KVCPT_CUDA
    if (cuda_device_count() == 0) {
        tl_skip("memory plan vs cuda engine", "no CUDA device visible");
        return tl_finish();
    }
    const RefreshMask none = refresh_mask_off();
    const DecoderRecompute keep = DECODER_RECOMPUTE_NONE, full = DECODER_RECOMPUTE_FULL, attn = DECODER_RECOMPUTE_ATTN;
    const Case cases[] = {
        {"fp32 keep-all sharded causal B2 T33", 0, DECODER_CUDA_FP32, keep, 0, 2, 33, none, DECODER_ATTN_AUTO},
        {"fp32 recompute device-optim mask B1 T49",
         0,
         DECODER_CUDA_FP32,
         full,
         1,
         1,
         49,
         {.enabled = 1, .L = 40, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .S = 9},
         DECODER_ATTN_AUTO},
        {"bf16 recompute sharded mask tied B3 T21",
         1,
         DECODER_CUDA_BF16_WEIGHTS,
         full,
         0,
         3,
         21,
         {.enabled = 1, .L = 20, .K = 4, .pool_kernel = 3, .agg = GROUP_AGG_MEAN, .S = 1},
         DECODER_ATTN_AUTO},
        {"bf16sr keep-all device-optim causal B2 T70", 0, DECODER_CUDA_BF16_WEIGHTS, keep, 1, 2, 70, none,
         DECODER_ATTN_AUTO},
        /* per-row records (evict, restride): selections larger than B * T * Hkv */
        {"fp32 keep-all device-optim evict restride B2 T49",
         0,
         DECODER_CUDA_FP32,
         keep,
         1,
         2,
         49,
         {.enabled = 1, .L = 40, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .evict = 1, .restride = 3, .S = 9},
         DECODER_ATTN_AUTO},
        {"bf16 recompute sharded restride tied B3 T33",
         1,
         DECODER_CUDA_BF16_WEIGHTS,
         full,
         0,
         3,
         33,
         {.enabled = 1, .L = 20, .K = 4, .pool_kernel = 3, .agg = GROUP_AGG_MEAN, .restride = 5, .S = 13},
         DECODER_ATTN_AUTO},
        /* recompute=attn: the layers' attention halves and one shared MLP half */
        {"fp32 recompute=attn device-optim mask B1 T49",
         0,
         DECODER_CUDA_FP32,
         attn,
         1,
         1,
         49,
         {.enabled = 1, .L = 40, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .S = 9},
         DECODER_ATTN_AUTO},
        {"bf16 recompute=attn sharded evict restride tied B3 T33",
         1,
         DECODER_CUDA_BF16_WEIGHTS,
         attn,
         0,
         3,
         33,
         {.enabled = 1, .L = 20, .K = 4, .pool_kernel = 3, .agg = GROUP_AGG_MEAN, .evict = 1, .restride = 5, .S = 13},
         DECODER_ATTN_AUTO},
        {"bf16sr recompute=attn device-optim causal B2 T70", 0, DECODER_CUDA_BF16_WEIGHTS, attn, 1, 2, 70, none,
         DECODER_ATTN_AUTO},
        /* attn cudnn: its region held by the engine, causal, S < L and S > L */
        {"bf16 cudnn keep-all device-optim causal B2 T33", 0, DECODER_CUDA_BF16_WEIGHTS, keep, 1, 2, 33, none,
         DECODER_ATTN_CUDNN},
        {"bf16 cudnn recompute sharded mask tied B3 T21",
         1,
         DECODER_CUDA_BF16_WEIGHTS,
         full,
         0,
         3,
         21,
         {.enabled = 1, .L = 20, .K = 4, .pool_kernel = 3, .agg = GROUP_AGG_MEAN, .S = 1},
         DECODER_ATTN_CUDNN},
        {"bf16 cudnn recompute=attn device-optim mask S>L B1 T49",
         0,
         DECODER_CUDA_BF16_WEIGHTS,
         attn,
         1,
         1,
         49,
         {.enabled = 1, .L = 20, .K = 6, .pool_kernel = 7, .agg = GROUP_AGG_MAX, .S = 29},
         DECODER_ATTN_CUDNN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (tl_case_selected(cases[i].label)) run_case(&cases[i]);
    if (tl_case_selected("fp32 mask set after a causal forward B2 T49"))
        run_mask_after_forward("fp32 mask set after a causal forward B2 T49");
#ifdef KVCPT_CUDA_EMU
    if (tl_case_selected("attn cudnn workspace cap")) run_cudnn_workspace_cap();
#endif
    for (int ranks = 1; ranks <= 2; ranks++) {
        run_zero3_optim(OPTIM_ADAMW8BIT, ranks);
        run_zero3_optim(OPTIM_ADAMW, ranks);
    }
#else
    tl_skip("memory plan vs cuda engine", "the CUDA backend was not compiled");
#endif
    return tl_finish();
}
