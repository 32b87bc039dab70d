/* Whole-model checks on the tiny preset: finite differences of the loss
 * against every parameter tensor with the mask active (K < L, selection
 * frozen as in training), K = L identical to causal, tied embeddings, and
 * impossible configs rejected with the field named. */
#include <math.h>
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../model/decoder.h"
#include "../testlib.h"

/* A mask with max aggregation: a function, since the macros below take the
 * letters of its fields. */
static RefreshMask max_mask(int64_t prefill, int64_t keep, int64_t pool, int64_t refresh) {
    return (RefreshMask){
        .enabled = 1, .L = prefill, .K = keep, .pool_kernel = pool, .agg = GROUP_AGG_MAX, .S = refresh};
}

#define B 2
#define L 12
#define S 4
#define T (L + S)

static void make_batch(int32_t *tok, int32_t *tgt, int64_t V, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < B * T; i++) tok[i] = (int32_t)(rng_u64(&r) % (uint64_t)V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) tgt[b * T + t] = t + 1 < T ? tok[b * T + t + 1] : -1;
}

static void fd_model(const char *tag, Decoder *m, const int32_t *tok, const int32_t *tgt) {
    decoder_zero_grad(m);
    decoder_forward(m, tok, tgt, B, T);
    decoder_backward(m);
    m->pass.freeze_selection = 1; /* the selection is a constant of the backward */
    const float h = 1e-2f;   /* loss is O(4): larger steps keep fp32 rounding small */
    for (int i = 0; i < m->layout.n; i++) {
        const ParamTensor *t = &m->layout.t[i];
        int n = t->numel < 12 ? (int)t->numel : 12;
        float num[12], ana[12];
        for (int s = 0; s < n; s++) {
            int64_t j = t->offset + (s * 7919) % t->numel;
            float keep = m->params[j];
            m->params[j] = keep + h;
            double fp = decoder_forward(m, tok, tgt, B, T);
            m->params[j] = keep - h;
            double fm = decoder_forward(m, tok, tgt, B, T);
            m->params[j] = keep;
            num[s] = (float)((fp - fm) / (2.0 * h));
            ana[s] = m->grads[j];
        }
        char name[160];
        snprintf(name, sizeof name, "FD %s %s", tag, t->name);
        tl_close(name, ana, num, n, 3e-4, 3e-2);
    }
    m->pass.freeze_selection = 0;
}

static void gradcheck(int tied) {
    DecoderConfig c;
    config_load(&c, "tiny");
    c.tie_word_embeddings = tied;
    c.initializer_range = 0.3; /* larger weights: attention far from uniform, gradients well above FD noise */
    Decoder m;
    decoder_create(&m, &c);
    decoder_init_random(&m, 42);
    RefreshMask mask = max_mask(L, 3, 3, S);
    decoder_set_mask(&m, &mask);
    int32_t tok[B * T], tgt[B * T];
    make_batch(tok, tgt, c.vocab_size, 5);
    fd_model(tied ? "tied, mask K=3" : "mask K=3", &m, tok, tgt);
    decoder_free(&m);
}

static void k_equals_l(void) {
    DecoderConfig c;
    config_load(&c, "tiny");
    c.initializer_range = 0.3;
    Decoder a, b;
    decoder_create(&a, &c), decoder_create(&b, &c);
    decoder_init_random(&a, 3), decoder_init_random(&b, 3);
    RefreshMask full = max_mask(L, L, 7, S);
    decoder_set_mask(&b, &full);
    int32_t tok[B * T], tgt[B * T];
    make_batch(tok, tgt, c.vocab_size, 9);
    float la = decoder_forward(&a, tok, tgt, B, T), lb = decoder_forward(&b, tok, tgt, B, T);
    decoder_backward(&a), decoder_backward(&b);
    float *za = xmalloc(sizeof(float) * B * T * c.vocab_size), *zb = xmalloc(sizeof(float) * B * T * c.vocab_size);
    decoder_logits(&a, za, 0, B * T), decoder_logits(&b, zb, 0, B * T);
    tl_identical("model K = L: logits bit-identical to causal", zb, za, B * T * c.vocab_size);
    tl_identical("model K = L: loss bit-identical to causal", &lb, &la, 1);
    tl_identical("model K = L: every gradient bit-identical to causal", b.grads, a.grads, a.layout.total);
    /* and K < L must actually change the last S rows */
    RefreshMask part = max_mask(L, 2, 3, S);
    decoder_set_mask(&b, &part);
    decoder_forward(&b, tok, tgt, B, T);
    decoder_logits(&b, zb, 0, B * T);
    int prefill_same = memcmp(za, zb, sizeof(float) * (size_t)(L * c.vocab_size)) == 0;
    int tail_differs =
        memcmp(za + L * c.vocab_size, zb + L * c.vocab_size, sizeof(float) * (size_t)(S * c.vocab_size)) != 0;
    tl_result(prefill_same && tail_differs, "model K < L: prefill rows unchanged, refresh rows changed",
              "prefill same %d, tail differs %d", prefill_same, tail_differs);
    free(za), free(zb);
    decoder_free(&a), decoder_free(&b);
}

/* The training forward (decoder_forward_train), which computes the head's
 * gradient while its logits are at hand, against the loss-only forward and
 * the backward's recomputation: the same loss and gradients, bit for bit,
 * over several logits chunks (rows = b * T + t past 256) and a tail of rows
 * without a target; a loss-only forward in between leaves the gradients
 * alone and its backward recomputes. */
static void head_grad_in_forward(int tied, int masked) {
    enum { HB = 2, HT = 300 };
    DecoderConfig c;
    config_load(&c, "tiny");
    c.tie_word_embeddings = tied;
    c.initializer_range = 0.3;
    Decoder a, b;
    decoder_create(&a, &c), decoder_create(&b, &c);
    decoder_init_random(&a, 11), decoder_init_random(&b, 11);
    if (masked) {
        RefreshMask mk = max_mask(HT - 20, 40, 3, 20);
        decoder_set_mask(&a, &mk), decoder_set_mask(&b, &mk);
    }
    static int32_t tok[HB * HT], tgt[HB * HT];
    Rng r;
    rng_seed(&r, 17);
    for (int i = 0; i < HB * HT; i++) tok[i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
    for (int i = 0; i < HB * HT; i++) tgt[i] = i % HT < HT - 30 ? tok[(i + 1) % (HB * HT)] : -1;
    decoder_zero_grad(&a), decoder_zero_grad(&b); /* before the forward, as the trainer and bench model do */
    float la = decoder_forward(&a, tok, tgt, HB, HT), lb = decoder_forward_train(&b, tok, tgt, HB, HT);
    decoder_backward(&a), decoder_backward(&b);
    char name[160];
    snprintf(name, sizeof name, "head gradient in the forward (%s, %s): loss bit-identical", tied ? "tied" : "untied",
             masked ? "mask" : "causal");
    tl_identical(name, &lb, &la, 1);
    snprintf(name, sizeof name, "head gradient in the forward (%s, %s): every gradient bit-identical",
             tied ? "tied" : "untied", masked ? "mask" : "causal");
    tl_identical(name, b.grads, a.grads, a.layout.total);
    decoder_zero_grad(&b);
    decoder_forward_train(&b, tok, tgt, HB, HT);
    decoder_zero_grad(&b);
    decoder_forward(&b, tok, tgt, HB, HT);
    float zero = 0.0f;
    int untouched = 1;
    for (int64_t i = 0; i < b.layout.total; i++) untouched &= memcmp(&b.grads[i], &zero, sizeof zero) == 0;
    snprintf(name, sizeof name, "head gradient in the forward (%s, %s): a loss-only forward leaves the gradients alone",
             tied ? "tied" : "untied", masked ? "mask" : "causal");
    tl_result(untouched, name, "a gradient changed");
    decoder_backward(&b);
    snprintf(name, sizeof name, "head gradient in the forward (%s, %s): after a loss-only forward, recomputed",
             tied ? "tied" : "untied", masked ? "mask" : "causal");
    tl_identical(name, b.grads, a.grads, a.layout.total);
    decoder_free(&a), decoder_free(&b);
}

/* ---- impossible configs: each names its field ---- */
static void parse_text(void *text) {
    DecoderConfig c;
    config_parse_json(&c, (const char *)text, "bad.json");
}
#define BASE "\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,"
static void config_errors(void) {
    tl_expect_death("heads not divisible by kv heads", parse_text,
                    "{" BASE "\"num_attention_heads\":4,\"num_key_value_heads\":3,\"head_dim\":8}",
                    "'num_key_value_heads' (3) must divide 'num_attention_heads' (4)");
    tl_expect_death("odd head_dim", parse_text, "{" BASE "\"num_attention_heads\":4,\"head_dim\":7}", "'head_dim'");
    tl_expect_death("missing hidden_size", parse_text, "{\"vocab_size\":64}", "'hidden_size' is missing");
    tl_expect_death("negative layers", parse_text,
                    "{\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":-1,"
                    "\"num_attention_heads\":4}",
                    "'num_hidden_layers' must be > 0");
    tl_expect_death("unknown rope type", parse_text,
                    "{" BASE "\"num_attention_heads\":4,\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":2}}",
                    "'rope_scaling.rope_type' is 'longrope'");
    tl_expect_death("invalid JSON names line and column", parse_text, "{\"vocab_size\": 64,\n oops}", "line 2");
}
static void bad_s(void *arg) {
    Decoder *m = arg;
    RefreshMask mk = max_mask(8, 2, 7, -1);
    decoder_set_mask(m, &mk);
}
static void bad_t(void *arg) {
    Decoder *m = arg;
    RefreshMask mk = max_mask(8, 2, 7, 4);
    decoder_set_mask(m, &mk);
    int32_t tok[10] = {0};
    decoder_forward(m, tok, NULL, 1, 10);
}
static void bad_token(void *arg) {
    Decoder *m = arg;
    int32_t tok[3] = {1, 64, 2};
    decoder_forward(m, tok, NULL, 1, 3);
}
/* The pass is built once, by decoder_create, over the model's own fields: a
 * copy of the struct would run on the original's buffers, so it is refused
 * (by a backward, which without the check dies otherwise, before any
 * OpenMP region a forked child could hang in). */
static void moved_model(void *arg) {
    Decoder moved = *(Decoder *)arg;
    decoder_backward(&moved);
}

/* Dynamic RoPE scaling's tables depend on the sequence length: a model that
 * ran a longer sequence first rebuilds them for a shorter one, giving the
 * logits of a fresh model (both past max_position_embeddings 16, where the
 * base grows with the length). */
static void dynamic_rope_lengths(void) {
    DecoderConfig c;
    config_parse_json(&c,
                      "{\"vocab_size\":64,\"hidden_size\":32,\"intermediate_size\":48,\"num_hidden_layers\":2,"
                      "\"num_attention_heads\":4,\"num_key_value_heads\":2,\"head_dim\":8,\"rope_theta\":500.0,"
                      "\"max_position_embeddings\":16,\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":4.0}}",
                      "dynamic.json");
    enum { LONG = 40, SHORT = 24 };
    Decoder a, b;
    decoder_create(&a, &c), decoder_create(&b, &c);
    decoder_init_random(&a, 5), decoder_init_random(&b, 5);
    int32_t tok[LONG];
    for (int i = 0; i < LONG; i++) tok[i] = (int32_t)((i * 37 + 11) % 64);
    float *la = xmalloc(sizeof(float) * SHORT * 64), *lb = xmalloc(sizeof(float) * SHORT * 64);
    decoder_forward(&a, tok, NULL, 1, LONG);
    decoder_forward(&a, tok, NULL, 1, SHORT);
    decoder_logits(&a, la, 0, SHORT);
    decoder_forward(&b, tok, NULL, 1, SHORT);
    decoder_logits(&b, lb, 0, SHORT);
    tl_identical("dynamic RoPE: T = 24 after T = 40 gives a fresh model's logits (the tables follow T)", la, lb,
                 SHORT * 64);
    free(la), free(lb);
    decoder_free(&a), decoder_free(&b);
}

int main(void) {
    /* KVCPT_TEST_CASES picks groups by these labels (tests/kernels/test_blas_cores.sh
     * runs the bit-identity ones again under other BLAS cores) */
    if (tl_case_selected("gradcheck")) {
        gradcheck(0);
        gradcheck(1);
    }
    if (tl_case_selected("bits: K = L")) k_equals_l();
    if (tl_case_selected("bits: head gradient in the forward")) {
        head_grad_in_forward(0, 0);
        head_grad_in_forward(1, 0);
        head_grad_in_forward(1, 1);
    }
    if (tl_case_selected("rope: dynamic")) dynamic_rope_lengths();
    if (!tl_case_selected("errors")) return tl_finish();
    config_errors();
    DecoderConfig c;
    config_load(&c, "tiny");
    Decoder m;
    decoder_create(&m, &c);
    tl_expect_death("S < 0 is rejected naming 'S'", bad_s, &m, "'S' must be >= 0");
    tl_expect_death("T != L + S is rejected", bad_t, &m, "L + S = 8 + 4 (got 10)");
    tl_expect_death("token outside the vocabulary", bad_token, &m, "token 64 at position 1");
    tl_expect_death("a model moved after decoder_create is refused", moved_model, &m,
                    "llama: the model was moved after it was created");
    decoder_free(&m);
    return tl_finish();
}
