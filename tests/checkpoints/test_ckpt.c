/* Training checkpoints: an interrupted deterministic run resumed from a
 * checkpoint matches the uninterrupted run bit for bit; the manifest is what
 * makes a checkpoint visible; keep-last-N; corruption and mismatches fail
 * with the file named. */
#include <dirent.h>

#include "../../checkpoints/ckpt.h"
#include "../../common/rng.h"
#include "../../common/util.h"
#include "../ckpt_testutil.h"

#define RUN "build/tests/tmp_ckpt_run"
enum { N = 1000, TOTAL_STEPS = 20, SAVE_AT = 8 };

/* What a trainer carries across steps. */
typedef struct {
    float params[N], momentum[N];
    Rng rng;
    int64_t step, data_pos;
} State;

static void init_state(State *s) {
    memset(s, 0, sizeof *s);
    rng_seed(&s->rng, 1234);
    for (int i = 0; i < N; i++) s->params[i] = rng_normal(&s->rng);
}

/* SGD with momentum on 0.5*|p - target|^2 plus RNG noise and a data cursor. */
static void train_step(State *s) {
    for (int i = 0; i < N; i++) {
        float target = (float)((i + s->data_pos) % 17) * 0.1f;
        float g = s->params[i] - target + 0.05f * rng_normal(&s->rng);
        s->momentum[i] = 0.9f * s->momentum[i] + g;
        s->params[i] -= 0.01f * s->momentum[i];
    }
    s->data_pos += 37;
    s->step++;
}

/* Ranks split the params (and their momentum) into contiguous halves. */
static void save(const State *s, int world, uint64_t layout_hash, int keep_last) {
    CkptFileInfo info[4];
    for (int r = 0; r < world; r++) {
        int64_t begin = (int64_t)N * r / world, end = (int64_t)N * (r + 1) / world;
        CkptWriter w;
        ckpt_writer_begin(&w, RUN, s->step, r, world);
        int64_t range[2] = {begin, end};
        ckpt_add_section(&w, "params_range", range, sizeof range);
        ckpt_add_section(&w, "params", s->params + begin, (end - begin) * 4);
        ckpt_add_section(&w, "optim", s->momentum + begin, (end - begin) * 4);
        ckpt_add_section(&w, "rng", &s->rng, sizeof s->rng);
        ckpt_add_section(&w, "data_pos", &s->data_pos, sizeof s->data_pos);
        info[r] = ckpt_writer_finish(&w);
    }
    ckpt_write_manifest(RUN, s->step, world, layout_hash, info, world, keep_last);
}

static void load(State *s, const char *dir, int world, uint64_t layout_hash) {
    memset(s, 0x5a, sizeof *s); /* a fresh process: nothing carried over */
    for (int r = 0; r < world; r++) {
        CkptReader rd;
        ckpt_reader_open(&rd, dir, r, world, layout_hash);
        int64_t range[2];
        ckpt_read_section(&rd, "params_range", range, sizeof range);
        ckpt_read_section(&rd, "params", s->params + range[0], (range[1] - range[0]) * 4);
        ckpt_read_section(&rd, "optim", s->momentum + range[0], (range[1] - range[0]) * 4);
        ckpt_read_section(&rd, "rng", &s->rng, sizeof s->rng);
        ckpt_read_section(&rd, "data_pos", &s->data_pos, sizeof s->data_pos);
        s->step = rd.step;
        ckpt_reader_close(&rd);
    }
}

static void test_resume(int world) {
    system("rm -rf " RUN);
    static State ref, run;
    init_state(&ref);
    for (int i = 0; i < TOTAL_STEPS; i++) train_step(&ref);
    init_state(&run);
    for (int i = 0; i < SAVE_AT; i++) train_step(&run);
    save(&run, world, 0xabcdef, 3);
    char dir[4200];
    int64_t step = -1;
    int found = ckpt_find_latest(RUN, dir, sizeof dir, &step);
    load(&run, dir, world, 0xabcdef);
    while (run.step < TOTAL_STEPS) train_step(&run);
    char name[96];
    snprintf(name, sizeof name, "resume at step %d with %d rank file(s) is bit-identical", SAVE_AT, world);
    tl_result(found && step == SAVE_AT, "latest checkpoint found", "found %d step %lld", found, (long long)step);
    int same = memcmp(ref.params, run.params, sizeof ref.params) == 0 &&
               memcmp(&ref.rng, &run.rng, sizeof ref.rng) == 0 && ref.data_pos == run.data_pos &&
               memcmp(ref.momentum, run.momentum, sizeof ref.momentum) == 0;
    tl_result(same, name, "params/momentum/rng/data position differ after resume");
}

static int count_step_dirs(void) {
    DIR *d = opendir(RUN "/ckpt");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "step_", 5) == 0) n++;
    if (d) closedir(d);
    return n;
}

static void test_manifest_and_pruning(void) {
    system("rm -rf " RUN);
    static State s;
    init_state(&s);
    for (int i = 0; i < 5; i++) {
        train_step(&s);
        save(&s, 1, 7, 2);
    }
    char dir[4200];
    int64_t step;
    tl_result(count_step_dirs() == 2 && ckpt_find_latest(RUN, dir, sizeof dir, &step) && step == 5,
              "keep-last-2 leaves steps 4 and 5", "%d dirs, latest %lld", count_step_dirs(), (long long)step);
    /* rank files without a manifest: an interrupted save, invisible to resume */
    CkptWriter w;
    ckpt_writer_begin(&w, RUN, 6, 0, 1);
    ckpt_add_section(&w, "params", s.params, sizeof s.params);
    ckpt_writer_finish(&w);
    ckpt_find_latest(RUN, dir, sizeof dir, &step);
    tl_result(step == 5, "a step directory without manifest.json is ignored", "latest is %lld", (long long)step);
    ckpt_writer_begin(&w, RUN, 3, 0, 1); /* stale leftover below the latest */
    ckpt_writer_finish(&w);
    train_step(&s), train_step(&s), train_step(&s); /* step 8 */
    save(&s, 1, 7, 2);
    char p3[4200], p6[4200];
    ckpt_step_dir(p3, sizeof p3, RUN, 3);
    ckpt_step_dir(p6, sizeof p6, RUN, 6);
    tl_result(count_step_dirs() == 2 && file_size(p3) < 0 && file_size(p6) < 0,
              "pruning removes old complete and stale incomplete checkpoints", "%d dirs left", count_step_dirs());
    DIR *d = opendir(dir);
    struct dirent *e;
    int tmp_left = 0;
    while (d && (e = readdir(d))) tmp_left += strstr(e->d_name, ".tmp") != NULL;
    if (d) closedir(d);
    tl_result(tmp_left == 0, "no temporary files remain after a save", "%d left", tmp_left);
}

static char latest[4200];
static void open_latest_hash(void *h) {
    CkptReader r;
    ckpt_reader_open(&r, latest, 0, 1, *(uint64_t *)h);
}
static void open_latest_world2(void *unused) {
    CkptReader r;
    ckpt_reader_open(&r, latest, 0, 2, 0);
}
static void read_params(void *unused) {
    CkptReader r;
    static float buf[N];
    ckpt_reader_open(&r, latest, 0, 1, 0);
    ckpt_read_section(&r, "params", buf, sizeof buf);
}
static void read_missing(void *unused) {
    CkptReader r;
    ckpt_reader_open(&r, latest, 0, 1, 0);
    ckpt_read_section(&r, "ema", NULL, 4);
}

static void flip_byte(const char *path, int64_t off) {
    int64_t n;
    char *b = read_text_file(path, &n);
    b[off] ^= 0x10;
    write_bytes(path, b, n);
    free(b);
}

static void test_corruption(void) {
    int64_t step;
    ckpt_find_latest(RUN, latest, sizeof latest, &step);
    uint64_t wrong = 8;
    expect_error("layout hash mismatch refused", open_latest_hash, &wrong, "differs from this model's");
    expect_error("world size mismatch refused", open_latest_world2, NULL, "the reader expected 2");
    expect_error("missing section named", read_missing, NULL, "has no section 'ema'");
    char rank0[4300];
    snprintf(rank0, sizeof rank0, "%s/rank_00000.bin", latest);
    int64_t n;
    char *img = read_text_file(rank0, &n);
    CkptReader r;
    char err[512];
    int64_t acc = 0, rej = 0;
    for (int64_t pos = 0; pos < n; pos += (pos < 64 || pos > n - 400) ? 1 : 61)
        for (int v = 0; v < 3; v++) {
            char old = img[pos];
            img[pos] = (char)(v == 0 ? 0 : v == 1 ? 0xff : old ^ 0x40);
            if (ckpt_parse(&r, (uint8_t *)img, n, "mutant", err, sizeof err) == 0) acc++, free(r.s);
            else rej++;
            img[pos] = old;
        }
    for (int64_t len = 0; len < n; len += 13)
        if (ckpt_parse(&r, (uint8_t *)img, len, "cut", err, sizeof err) == 0) acc++, free(r.s);
        else rej++;
    tl_result(rej > 0, "rank file mutation sweep runs without crashing", "acc %lld rej %lld", (long long)acc,
              (long long)rej);
    flip_byte(rank0, 200); /* inside the params section */
    expect_error("corrupt section detected by its checksum", read_params, NULL, "fails its checksum");
    write_bytes(rank0, img, n - 8);
    expect_error("truncated rank file refused", read_params, NULL, "the manifest says");
    write_bytes(rank0, img, n);
    flip_byte(rank0, 17); /* the step field in the header */
    expect_error("header tampering detected via the manifest checksum", read_params, NULL, "checksum differs");
    free(img);
}

int main(void) {
    test_resume(1);
    test_resume(2);
    test_manifest_and_pruning();
    test_corruption();
    int rc = tl_finish();
    if (rc == 0) system("rm -rf " RUN);
    return rc;
}
