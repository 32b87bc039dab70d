/* Decode time per document, per policy, for several --batch sizes (the
 * figures of docs/eval.md, "Batching"): prefills max(B) random documents,
 * then times engine_decode_batch for each policy variant of the demo run,
 * best of REPS. Timing only: nothing is asserted.
 * usage: eval_batch_timing MODEL_DIR|PRESET L S REPS B1 [B2 ...]
 * (a preset gets a random init; a directory is loaded) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "checkpoints/model_file.h"
#include "common/rng.h"
#include "common/util.h"
#include "eval/engine.h"
int main(int argc, char **argv) {
    const char *src = argv[1];
    int64_t L = atoll(argv[2]), S = atoll(argv[3]);
    int reps = atoi(argv[4]);
    if (argc < 6) die("usage: eval_batch_timing MODEL_DIR|PRESET L S REPS B1 [B2 ...]");
    int Bs[16], nB = 0;
    for (int i = 5; i < argc && nB < 16; i++) Bs[nB++] = atoi(argv[i]);
    int Bmax = 0;
    for (int i = 0; i < nB; i++) Bmax = Bs[i] > Bmax ? Bs[i] : Bmax;
    KV_CHECK(Bmax >= 1 && Bmax <= 64 && L >= 1 && S >= 2 && reps >= 1,
             "eval_batch_timing: batch sizes 1..64, L >= 1, S >= 2, REPS >= 1");
    for (int i = 0; i < nB; i++) KV_CHECK(Bs[i] >= 1, "eval_batch_timing: batch sizes must be >= 1");
    DecoderConfig c;
    config_load(&c, src);
    Decoder m;
    decoder_create(&m, &c);
    if (strchr(src, '/')) model_file_load_fp32(src, &c, &m.layout, m.params);
    else decoder_init_random(&m, 1);
    DecodeEngine *eng = xcalloc(Bmax, sizeof *eng), *ep[64];
    int32_t *tok[64];
    Policy pol[64], *pp[64];
    double *nll = xmalloc(8 * S * Bmax);
    Rng r;
    rng_seed(&r, 5);
    double tp = 0;
    for (int b = 0; b < Bmax; b++) {
        tok[b] = xmalloc(4 * (L + S));
        ep[b] = &eng[b];
        pp[b] = &pol[b];
        for (int64_t i = 0; i < L + S; i++) tok[b][i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
        engine_create(&eng[b], &m, L + S, 32);
        double t0 = now_seconds();
        engine_prefill(&eng[b], tok[b], L);
        tp += now_seconds() - t0;
    }
    printf("prefill %.1f ms/doc (mean of %d)\n", 1e3 * tp / Bmax, Bmax);
    const char *names[] = {"full",      "streaming", "h2o",       "snapkv", "tova", "refreshkv",
                           "refreshkv", "refreshkv", "refreshkv", "restkv", "kvec"};
    int64_t qc[] = {0, 0, 0, 0, 0, 5, 10, 0, 0, 0, 0}, fx[] = {0, 0, 0, 0, 0, 0, 0, 10, 25, 0, 0};
    PolicyShape sh = {c.num_hidden_layers,
                      c.num_attention_heads,
                      c.num_key_value_heads,
                      c.head_dim,
                      c.hidden_size,
                      L,
                      32,
                      L + S,
                      NULL,
                      NULL};
    double tot[16] = {0};
    printf("%-14s", "ms/doc");
    for (int i = 0; i < nB; i++) printf("  B=%-6d", Bs[i]);
    printf("\n");
    for (int v = 0; v < 11; v++) {
        printf("%-9s %2lld %2lld", names[v], (long long)qc[v], (long long)fx[v]);
        for (int bi = 0; bi < nB; bi++) {
            int B = Bs[bi];
            double best = 1e30;
            for (int k = 0; k < reps; k++) {
                PolicyOptions o = policy_default_options(L / 8);
                if (!strcmp(names[v], "refreshkv")) o.qc_stride = qc[v], o.fixed_stride = fx[v];
                for (int b = 0; b < B; b++) policy_create(&pol[b], names[v], &sh, &o);
                double a = now_seconds();
                engine_decode_batch(ep, pp, (const int32_t *const *)tok, B, S, nll);
                double t = now_seconds() - a;
                for (int b = 0; b < B; b++) policy_destroy(&pol[b]);
                best = t < best ? t : best;
            }
            printf("  %8.2f", 1e3 * best / B);
            tot[bi] += 1e3 * best / B;
        }
        printf("\n");
    }
    printf("%-14s", "sum");
    for (int i = 0; i < nB; i++) printf("  %8.2f", tot[i]);
    printf("\n");
    return 0;
}
