/* `kvcpt eval --batch`: documents decoded together give the same bits as
 * each decoded alone. (1) The decode matmul's rows do not depend on how many
 * rows are computed together (shapes where OpenBLAS's do: N = 1 vs N >= 2
 * with OC = 1024), and it agrees with BLAS within rounding. (2) The engine:
 * every policy over three documents at once equals each document alone, NLL
 * for NLL, and reads the same cached keys; (3) every policy of every document
 * as forks of the documents' engines in one batch (eval's CPU path) equals
 * each decoded alone. tests/eval/test_eval_cli.sh checks the
 * command (skipped documents, a last batch that is not full). */
#include <string.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../eval/engine.h"
#include "../../eval/row_matmul.h"
#include "../../kernels/matmul.h"
#include "../testlib.h"

#define L 48
#define S 9
#define DOCS 3

static void fill(float *x, int64_t n, Rng *r) {
    for (int64_t i = 0; i < n; i++) x[i] = rng_normal(r);
}

/* Every row of an N-row product is bitwise the row computed alone. */
static void check_row_matmul(int64_t N, int64_t IC, int64_t OC, Rng *r) {
    float *inp = xmalloc(sizeof(float) * (size_t)(N * IC)), *w = xmalloc(sizeof(float) * (size_t)(OC * IC));
    float *all = xmalloc(sizeof(float) * (size_t)(N * OC)), *one = xmalloc(sizeof(float) * (size_t)(N * OC));
    float *ref = xmalloc(sizeof(float) * (size_t)(N * OC));
    fill(inp, N * IC, r), fill(w, OC * IC, r);
    row_matmul_forward(all, inp, w, N, IC, OC);
    for (int64_t i = 0; i < N; i++) row_matmul_forward(one + i * OC, inp + i * IC, w, 1, IC, OC);
    matmul_forward_cpu(ref, inp, w, N, IC, OC);
    char name[128];
    snprintf(name, sizeof name, "row_matmul (%lld, %lld) x (%lld, %lld): rows of N = %lld equal rows alone",
             (long long)N, (long long)IC, (long long)IC, (long long)OC, (long long)N);
    tl_identical(name, all, one, N * OC);
    snprintf(name, sizeof name, "row_matmul (%lld, %lld) x (%lld, %lld) matches BLAS", (long long)N, (long long)IC,
             (long long)IC, (long long)OC);
    tl_close(name, all, ref, N * OC, 1e-5 * (double)IC, 1e-5);
    free(inp), free(w), free(all), free(one), free(ref);
}

static Decoder model;
static DecodeEngine eng[DOCS];
static int32_t doc[DOCS][L + S];

static void make_policies(Policy *p, int n, const char *name, const PolicyOptions *o) {
    PolicyShape sh = {model.cfg.num_hidden_layers,
                      model.cfg.num_attention_heads,
                      model.cfg.num_key_value_heads,
                      model.cfg.head_dim,
                      model.cfg.hidden_size,
                      L,
                      32,
                      L + S,
                      NULL,
                      NULL};
    for (int i = 0; i < n; i++) policy_create(&p[i], name, &sh, o);
}

static int same_full_steps(const Policy *a, const Policy *b) {
    if (!a->full_steps_per_layer || !b->full_steps_per_layer) return a->full_steps_per_layer == b->full_steps_per_layer;
    return memcmp(a->full_steps_per_layer, b->full_steps_per_layer,
                  sizeof(int64_t) * (size_t)model.cfg.num_hidden_layers) == 0;
}

/* Policy `name` over the three documents together vs one at a time. */
static void check_engine(const char *name, PolicyOptions o, const char *variant) {
    Policy together[DOCS], alone[DOCS], *tp[DOCS];
    DecodeEngine *ep[DOCS];
    const int32_t *tok[DOCS];
    double nll_b[DOCS * S], nll_1[DOCS * S];
    int64_t reads_b[DOCS], reads_1[DOCS];
    make_policies(together, DOCS, name, &o), make_policies(alone, DOCS, name, &o);
    for (int d = 0; d < DOCS; d++) ep[d] = &eng[d], tp[d] = &together[d], tok[d] = doc[d], eng[d].kv_reads = 0;
    engine_decode_batch(ep, tp, tok, DOCS, S, nll_b);
    for (int d = 0; d < DOCS; d++) reads_b[d] = eng[d].kv_reads, eng[d].kv_reads = 0;
    for (int d = 0; d < DOCS; d++)
        engine_decode(&eng[d], &alone[d], doc[d], S, nll_1 + d * S), reads_1[d] = eng[d].kv_reads;
    int steps_same = 1;
    for (int d = 0; d < DOCS; d++) steps_same &= same_full_steps(&together[d], &alone[d]);
    char t[128];
    snprintf(t, sizeof t, "%s%s: %d documents together give each one's NLLs bit for bit", name, variant, DOCS);
    tl_result(memcmp(nll_b, nll_1, sizeof nll_b) == 0, t, "document 0 step 1: %.17g vs %.17g", nll_b[1], nll_1[1]);
    snprintf(t, sizeof t, "%s%s: same keys read and full steps per document", name, variant);
    tl_result(memcmp(reads_b, reads_1, sizeof reads_b) == 0 && steps_same, t, "kv reads %lld vs %lld",
              (long long)reads_b[0], (long long)reads_1[0]);
    for (int d = 0; d < DOCS; d++) policy_destroy(&together[d]), policy_destroy(&alone[d]);
}

/* Every registered policy on every document, each a fork of its document's
 * engine (engine_fork), all in one batch (what eval runs on the CPU) vs the
 * document's own engine decoding that policy alone: the same NLLs bit for
 * bit, the same keys read, and the parent's prefill untouched. */
static void check_forks(void) {
    int count;
    const PolicyInfo *reg = policy_registry(&count);
    int64_t rows = (int64_t)count * DOCS;
    DecodeEngine *fk = xcalloc((size_t)rows, sizeof(DecodeEngine)),
                 **ep = xmalloc(sizeof(DecodeEngine *) * (size_t)rows);
    Policy *together = xmalloc(sizeof(Policy) * (size_t)rows), *alone = xmalloc(sizeof(Policy) * (size_t)rows);
    Policy **tp = xmalloc(sizeof(Policy *) * (size_t)rows);
    const int32_t **tok = xmalloc(sizeof(int32_t *) * (size_t)rows);
    double *nll_b = xmalloc(sizeof(double) * (size_t)(rows * S)), *nll_1 = xmalloc(sizeof(double) * (size_t)(rows * S));
    int64_t *reads_b = xmalloc(sizeof(int64_t) * (size_t)rows), *reads_1 = xmalloc(sizeof(int64_t) * (size_t)rows);
    /* the parents' prefill caches, to see that no fork writes them */
    int64_t KD = model.cfg.num_key_value_heads * model.cfg.head_dim;
    float *kc0 = xmalloc(sizeof(float) * (size_t)(L * KD));
    memcpy(kc0, eng[0].kc[0], sizeof(float) * (size_t)(L * KD));
    for (int i = 0; i < count; i++)
        for (int d = 0; d < DOCS; d++) {
            int64_t row = (int64_t)i * DOCS + d;
            PolicyOptions o = policy_default_options(strcmp(reg[i].name, "restkv") == 0 ? 40 : L / 8);
            make_policies(&together[row], 1, reg[i].name, &o), make_policies(&alone[row], 1, reg[i].name, &o);
            engine_fork(&fk[row], &eng[d]);
            ep[row] = &fk[row], tp[row] = &together[row], tok[row] = doc[d];
        }
    engine_decode_batch(ep, tp, tok, rows, S, nll_b);
    int prefill_kept = memcmp(kc0, eng[0].kc[0], sizeof(float) * (size_t)(L * KD)) == 0;
    for (int64_t row = 0; row < rows; row++) {
        int d = (int)(row % DOCS);
        reads_b[row] = fk[row].kv_reads;
        eng[d].kv_reads = 0;
        engine_decode(&eng[d], &alone[row], doc[d], S, nll_1 + row * S);
        reads_1[row] = eng[d].kv_reads;
    }
    int64_t bad = -1;
    for (int64_t row = 0; row < rows && bad < 0; row++)
        if (memcmp(nll_b + row * S, nll_1 + row * S, sizeof(double) * S) != 0 || reads_b[row] != reads_1[row] ||
            !same_full_steps(&together[row], &alone[row]))
            bad = row;
    char t[160];
    snprintf(t, sizeof t,
             "%d policies x %d documents as forks in one batch: each row's NLLs, keys read and full "
             "steps equal its document's engine decoding that policy alone",
             count, DOCS);
    tl_result(bad < 0, t, "row %lld (%s): step 1 %.17g vs %.17g", (long long)bad, bad >= 0 ? together[bad].name : "",
              bad >= 0 ? nll_b[bad * S + 1] : 0.0, bad >= 0 ? nll_1[bad * S + 1] : 0.0);
    tl_result(prefill_kept, "forks leave their parent's prefill cache untouched", "layer 0 keys changed");
    for (int64_t row = 0; row < rows; row++)
        engine_fork_free(&fk[row]), policy_destroy(&together[row]), policy_destroy(&alone[row]);
    free(fk), free(ep), free(together), free(alone), free(tp), free(tok), free(nll_b), free(nll_1), free(reads_b);
    free(reads_1), free(kc0);
}

int main(void) {
    Rng r;
    rng_seed(&r, 11);
    /* OC = 1024 and 768: OpenBLAS 0.3.21's N = 2 rows differ from N = 1 there */
    const int64_t shapes[][3] = {{2, 64, 1024}, {3, 256, 768}, {8, 64, 192}, {5, 37, 29}, {33, 48, 32}, {1, 16, 16}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        check_row_matmul(shapes[i][0], shapes[i][1], shapes[i][2], &r);

    DecoderConfig c;
    config_load(&c, "tiny");
    c.initializer_range = 0.3;
    c.vocab_size = 1024; /* a head wide enough that OpenBLAS's rows would depend on N */
    decoder_create(&model, &c);
    decoder_init_random(&model, 23);
    for (int d = 0; d < DOCS; d++) {
        for (int i = 0; i < L + S; i++) doc[d][i] = (int32_t)(rng_u64(&r) % (uint64_t)c.vocab_size);
        engine_create(&eng[d], &model, L + S, 32);
        engine_prefill(&eng[d], doc[d], L);
    }
    int count;
    const PolicyInfo *reg = policy_registry(&count);
    for (int i = 0; i < count; i++)
        check_engine(reg[i].name, policy_default_options(strcmp(reg[i].name, "restkv") == 0 ? 40 : L / 8), "");
    PolicyOptions qc = policy_default_options(L / 8), fixed = policy_default_options(L / 8);
    qc.qc_stride = 2, qc.threshold = 0.99, fixed.fixed_stride = 3;
    check_engine("refreshkv", qc, " (QC 2)");
    check_engine("refreshkv", fixed, " (fixed stride 3)");
    check_forks();
    for (int d = 0; d < DOCS; d++) engine_free(&eng[d]);
    decoder_free(&model);
    return tl_finish();
}
