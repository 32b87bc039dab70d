/* 8-bit AdamW edge cases: all-zero blocks, one huge value per block,
 * rejected non-finite gradients, thread-count determinism, exact
 * save/load (and rejection of corrupt files), segment rules. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../common/rng.h"
#include "../../common/util.h"
#include "../../model/config.h"
#include "../../optim/optimizer.h"
#include "../optim_testutil.h"
#include "../testlib.h"

#define N 20000 /* one segment: 78 full blocks and a partial one */

static void normal(Rng *r, float *x, int64_t n, float sd) {
    for (int64_t i = 0; i < n; i++) x[i] = sd * rng_normal(r);
}

static Optimizer *make(OptimKind k) {
    int64_t off[2] = {0, N + 10}, num[2] = {N, 3000};
    return optim_create(k, off, num, 2);
}
#define BUF (N + 10 + 3000)

static void zero_blocks(void) {
    Optimizer *o = make(OPTIM_ADAMW8BIT);
    AdamWHyper h = adamw_hyper_default();
    float *p = xmalloc(BUF * 4), *g = xcalloc(BUF, 4), *p0 = xmalloc(BUF * 4), *m = xmalloc(N * 4), *v = xmalloc(N * 4);
    Rng r;
    rng_seed(&r, 3);
    normal(&r, p, BUF, 0.1f);
    memcpy(p0, p, BUF * 4);
    for (int t = 1; t <= 3; t++) optim_step(o, p, g, &h, t);
    optim_read_state(o, 0, m, v);
    int zero = 1;
    for (int i = 0; i < N; i++) zero &= m[i] == 0 && v[i] == 0;
    tl_result(zero && memcmp(p, p0, BUF * 4) == 0, "all-zero gradients: states exactly 0, params unchanged", "");
    /* one block gets gradients, its neighbours stay exactly zero */
    for (int i = 512; i < 768; i++) g[i] = 0.01f * rng_normal(&r);
    optim_step(o, p, g, &h, 4);
    optim_read_state(o, 0, m, v);
    int others = 1, inside = 0;
    for (int i = 0; i < N; i++) {
        if (i >= 512 && i < 768) inside += m[i] != 0;
        else others &= m[i] == 0 && v[i] == 0 && p[i] == p0[i];
    }
    tl_result(others && inside > 200, "zero blocks beside a live block stay exactly zero", "inside nonzero %d", inside);
    free(p), free(g), free(p0), free(m), free(v);
    optim_free(o);
}

static void huge_value(void) {
    Optimizer *o = make(OPTIM_ADAMW8BIT);
    AdamWHyper h = adamw_hyper_default();
    float *p = xmalloc(BUF * 4), *g = xmalloc(BUF * 4), *m = xmalloc(N * 4), *v = xmalloc(N * 4);
    Rng r;
    rng_seed(&r, 5);
    normal(&r, p, BUF, 0.1f);
    normal(&r, g, BUF, 0.01f);
    g[300] = 1e10f;   /* block 1 */
    g[600] = -1e10f;  /* block 2 */
    optim_step(o, p, g, &h, 1);
    optim_read_state(o, 0, m, v);
    int finite = 1;
    for (int i = 0; i < BUF; i++) finite &= isfinite(p[i]);
    for (int i = 0; i < N; i++) finite &= isfinite(m[i]) && isfinite(v[i]);
    /* the update as written in adamw_moments, with (1 - beta) rounded from double */
    float omb1 = (float)(1.0 - 0.9), omb2 = (float)(1.0 - 0.999);
    float m_pos = omb1 * 1e10f, v_pos = (omb2 * 1e10f) * 1e10f;
    tl_result(finite, "one huge gradient per block: params and states finite", "");
    /* the block's absmax is the huge value itself, stored exactly (code 1) */
    tl_result(m[300] == m_pos && v[300] == v_pos && v[600] == v_pos, "huge value: positive m and both v stored exactly",
              "m %.9g (want %.9g) v %.9g / %.9g (want %.9g)", m[300], m_pos, v[300], v[600], v_pos);
    /* the signed map has no -1: -absmax lands on -0.99296875 (bitsandbytes) */
    tl_result(fabsf(m[600] / -m_pos - 0.99296875f) < 1e-6f, "huge value: negative m stored as -0.99296875 absmax",
              "ratio %.9g", m[600] / -m_pos);
    free(p), free(g), free(m), free(v);
    optim_free(o);
}

static void rejects(float bad, const char *what) {
    Optimizer *o = make(OPTIM_ADAMW8BIT);
    AdamWHyper h = adamw_hyper_default();
    float *p = xmalloc(BUF * 4), *g = xmalloc(BUF * 4), *p1 = xmalloc(BUF * 4);
    Rng r;
    rng_seed(&r, 8);
    normal(&r, p, BUF, 0.1f);
    normal(&r, g, BUF, 0.01f);
    optim_step(o, p, g, &h, 1);
    size_t nc = (size_t)o->n_code, na = (size_t)o->n_absmax * 4, nf = (size_t)o->n_f32 * 4;
    uint8_t *mc = xmalloc(nc), *vc = xmalloc(nc);
    float *am = xmalloc(na), *m32 = xmalloc(nf);
    memcpy(mc, o->m_code, nc), memcpy(vc, o->v_code, nc), memcpy(am, o->m_absmax, na), memcpy(m32, o->m32, nf);
    memcpy(p1, p, BUF * 4);
    g[N + 10 + 1234] = bad;
    g[N + 10 + 2000] = bad;
    int rc = optim_step(o, p, g, &h, 2);
    char name[128];
    snprintf(name, sizeof name, "%s gradient: step rejected, first bad element reported", what);
    tl_result(rc != 0 && o->bad.segment == 1 && o->bad.index == 1234, name, "rc %d segment %d index %lld", rc,
              o->bad.segment, (long long)o->bad.index);
    snprintf(name, sizeof name, "%s gradient: params and states untouched", what);
    tl_result(memcmp(p, p1, BUF * 4) == 0 && memcmp(mc, o->m_code, nc) == 0 && memcmp(vc, o->v_code, nc) == 0 &&
                  memcmp(am, o->m_absmax, na) == 0 && memcmp(m32, o->m32, nf) == 0,
              name, "");
    free(p), free(g), free(p1), free(mc), free(vc), free(am), free(m32);
    optim_free(o);
}

/* params and all states after `steps` steps with `threads` threads */
static Optimizer *run_steps(int threads, int steps, float *p) {
    omp_set_num_threads(threads);
    Optimizer *o = make(OPTIM_ADAMW8BIT);
    AdamWHyper h = adamw_hyper_default();
    h.lr = 1e-3;
    float *g = xmalloc(BUF * 4);
    Rng r;
    rng_seed(&r, 11);
    normal(&r, p, BUF, 0.1f);
    for (int t = 1; t <= steps; t++) {
        normal(&r, g, BUF, 0.01f);
        optim_step(o, p, g, &h, t);
    }
    free(g);
    return o;
}

static int same_state(const Optimizer *a, const Optimizer *b) {
    return memcmp(a->m_code, b->m_code, (size_t)a->n_code) == 0 &&
           memcmp(a->v_code, b->v_code, (size_t)a->n_code) == 0 &&
           memcmp(a->m_absmax, b->m_absmax, (size_t)a->n_absmax * 4) == 0 &&
           memcmp(a->v_absmax, b->v_absmax, (size_t)a->n_absmax * 4) == 0 &&
           memcmp(a->m32, b->m32, (size_t)a->n_f32 * 4) == 0 && memcmp(a->v32, b->v32, (size_t)a->n_f32 * 4) == 0;
}

static void determinism(void) {
    float *p1 = xmalloc(BUF * 4), *p2 = xmalloc(BUF * 4), *p3 = xmalloc(BUF * 4);
    Optimizer *a = run_steps(1, 5, p1), *b = run_steps(2, 5, p2), *c = run_steps(3, 5, p3);
    tl_result(memcmp(p1, p2, BUF * 4) == 0 && memcmp(p1, p3, BUF * 4) == 0 && same_state(a, b) && same_state(a, c),
              "1, 2 and 3 threads give bit-identical params and states", "");
    omp_set_num_threads(2);
    optim_free(a), optim_free(b), optim_free(c);
    free(p1), free(p2), free(p3);
}

/* runs f in a child; returns its exit status (non-zero when it died) */
static int child_status(void (*f)(const char *), const char *arg) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        freopen("/dev/null", "w", stderr);
        f(arg);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void load_8bit(const char *path) {
    Optimizer *o = make(OPTIM_ADAMW8BIT);
    optim_load_file(o, path);
}
static void load_fp32(const char *path) {
    Optimizer *o = make(OPTIM_ADAMW);
    optim_load_file(o, path);
}

static void save_load(void) {
    char dir[] = "/tmp/kvcpt_optim_XXXXXX";
    if (!mkdtemp(dir)) die("mkdtemp failed");
    char path[128], bad[160];
    snprintf(path, sizeof path, "%s/state.bin", dir);
    float *p = xmalloc(BUF * 4), *q = xmalloc(BUF * 4), *g = xmalloc(BUF * 4);
    Optimizer *a = run_steps(2, 3, p);
    optim_save_file(a, path);
    Optimizer *b = make(OPTIM_ADAMW8BIT);
    optim_load_file(b, path);
    tl_result(same_state(a, b), "save/load: states restored exactly", "");
    memcpy(q, p, BUF * 4);
    AdamWHyper h = adamw_hyper_default();
    Rng r;
    rng_seed(&r, 21);
    for (int t = 4; t <= 6; t++) {
        normal(&r, g, BUF, 0.01f);
        optim_step(a, p, g, &h, t);
        optim_step(b, q, g, &h, t);
    }
    tl_result(memcmp(p, q, BUF * 4) == 0 && same_state(a, b), "save/load: resumed steps are bit-identical", "");
    tl_result(child_status(load_fp32, path) != 0, "load rejects a state of the other optimizer kind", "");
    int64_t size = file_size(path);
    char *bytes = read_text_file(path, NULL);
    snprintf(bad, sizeof bad, "%s/flipped.bin", dir);
    bytes[size / 2] ^= 0x10;
    FILE *f = fopen_check(bad, "wb");
    fwrite_check(bytes, 1, (size_t)size, f, bad);
    fclose_check(f, bad);
    tl_result(child_status(load_8bit, bad) != 0, "load rejects a state with one flipped bit (checksum)", "");
    snprintf(bad, sizeof bad, "%s/short.bin", dir);
    f = fopen_check(bad, "wb");
    fwrite_check(bytes, 1, (size_t)size - 9, f, bad);
    fclose_check(f, bad);
    tl_result(child_status(load_8bit, bad) != 0, "load rejects a truncated state", "");
    free(bytes);
    optim_free(a), optim_free(b);
    free(p), free(q), free(g);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) warnf("could not remove %s", dir);
}

static void segment_rules(void) {
    int64_t off[3] = {0, 4095, 4095 + 4096}, num[3] = {4095, 4096, 257};
    Optimizer *o = optim_create(OPTIM_ADAMW8BIT, off, num, 3);
    tl_result(!o->seg[0].quantized && o->seg[1].quantized && !o->seg[2].quantized && o->n_absmax == 16 &&
                  o->nblocks == 16 + 16 + 2,
              "segments under 4096 keep fp32 states; blocks start at each segment", "");
    tl_result(o->n_code == 4096 && o->n_f32 == 4095 + 257, "states: one code per quantized element, fp32 for the rest",
              "n_code %lld, n_f32 %lld", (long long)o->n_code, (long long)o->n_f32);
    optim_free(o);
}

int main(void) {
    zero_blocks();
    huge_value();
    rejects(NAN, "NaN");
    rejects(INFINITY, "inf");
    rejects(1e30f, "square-overflowing");
    determinism();
    save_load();
    segment_rules();
    return tl_finish();
}
