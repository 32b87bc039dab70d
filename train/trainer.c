#include "trainer.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <dirent.h>
#include <unistd.h>

#include "../checkpoints/ckpt.h"
#include "../checkpoints/model_source.h"
#include "../common/plot.h"
#include "../common/remove_tree.h"
#include "../common/tfevents.h"
#include "../common/util.h"
#include "../data/sha256.h"
#include "../parallel/shard_ckpt.h"
#include "../kernels/blas.h"
#include "../kernels/blas_core.h"
#include "../model/recompute.h"
#include "../optim/clip.h"

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

/* The dev evaluation runs at the end of every run (and every eval_interval
 * steps): a dev split without a document of L + S + 1 tokens would fail
 * there, after all the training, and --resume would redo the last step and
 * fail again. Checked before any work. A dataset without dev documents (a
 * small corpus, prepare --split none) trains without the evaluation at the
 * end, said once; asking for one every eval_interval steps is refused. */
static void check_dev_split(Trainer *t, const char *dir) {
    if (t->cfg.eval_batches == 0) return; /* no dev evaluation: the split is never read */
    int64_t n = t->dev_split ? data_split_num_docs(t->dev_split) : 0, longest = 0;
    if (n == 0) {
        const char *why = t->dev_split ? "its dev split holds no document" : "it has no dev split";
        KV_CHECK(t->cfg.eval_interval == 0,
                 "config: eval_interval=%lld asks for a dev evaluation, but data '%s' has none to give: %s ('%s'); set "
                 "eval_interval=0 eval_batches=0 (no dev evaluation), or prepare with a dev share (--split 80,10,10)",
                 (long long)t->cfg.eval_interval, t->cfg.data, why, dir);
        if (t->rank == 0)
            fprintf(stderr,
                    "kvcpt train: note: data '%s': %s; no dev evaluation (set eval_batches=0 to say so "
                    "and silence this note)\n",
                    t->cfg.data, why);
        if (t->dev_split) data_split_close(t->dev_split);
        t->dev_split = NULL;
        return;
    }
    for (int64_t d = 0; d < n; d++)
        if (data_split_doc_len(t->dev_split, d) > longest) longest = data_split_doc_len(t->dev_split, d);
    KV_CHECK(
        longest >= t->T + 1,
        "data '%s': the dev split '%s' has no document of the %lld tokens a dev sample needs (L + S + 1); it holds "
        "%lld document%s, the longest %lld tokens: lower L or S, prepare with more or longer dev documents, or "
        "set eval_batches=0 (no dev evaluation)",
        t->cfg.data, dir, (long long)(t->T + 1), (long long)n, n == 1 ? "" : "s", (long long)longest);
}

/* What the run trains on, for --resume to compare: the manifest's hash is
 * the content (it lists every shard and the inputs' hashes), the resolved
 * path is what the message names. */
static void record_data_identity(Trainer *t) {
    char mpath[4200];
    path_fmt(mpath, sizeof mpath, "%s/manifest.json", t->cfg.data);
    sha256_file(mpath, t->data_sha256);
    char real[PATH_MAX];
    KV_CHECK(realpath(t->cfg.data, real) != NULL, "data '%s': cannot resolve the directory: %s", t->cfg.data,
             strerror(errno));
    KV_CHECK(strlen(real) < sizeof t->data_realpath, "data '%s': resolved path too long", t->cfg.data);
    strcpy(t->data_realpath, real);
}

static void open_data(Trainer *t) {
    char dir[4200];
    path_fmt(dir, sizeof dir, "%s/train", t->cfg.data);
    t->train_split = data_split_open(dir);
    path_fmt(dir, sizeof dir, "%s/dev", t->cfg.data);
    t->dev_split = access(dir, F_OK) == 0 ? data_split_open(dir) : NULL;
    int on_answers = strcmp(t->cfg.loss_on, "answers") == 0;
    const AnswerRule *rule = data_split_answers(t->train_split);
    KV_CHECK(!on_answers || rule->present,
             "config: loss_on=answers needs data whose manifest marks answers ('%s' has none; prepare with --synthetic "
             "mqar)",
             t->cfg.data);
    t->answers = on_answers ? rule : NULL;
    /* one global sample order for every rank count; each rank takes its micro-batches from it */
    t->loader = loader_open(t->train_split, t->T + 1, (uint64_t)t->cfg.seed, 0, 1);
    KV_CHECK(loader_samples_per_epoch(t->loader) > 0,
             "data '%s': no training document has the %lld tokens a sample needs (L + S + 1); prepare with "
             "--min-tokens %lld or lower L",
             t->cfg.data, (long long)(t->T + 1), (long long)(t->T + 1));
    check_dev_split(t, dir);
    record_data_identity(t);
    if (t->rank == 0)
        fprintf(stderr,
                "kvcpt train: data %s: train %lld documents, %lld samples of L + S + 1 = %lld tokens per epoch; "
                "dev %lld documents%s\n",
                t->cfg.data, (long long)data_split_num_docs(t->train_split),
                (long long)loader_samples_per_epoch(t->loader), (long long)(t->T + 1),
                t->dev_split ? (long long)data_split_num_docs(t->dev_split) : 0LL,
                t->dev_split ? "" : " (no dev evaluation)");
}

/* The engine that runs the passes, and the startup line saying how. */
static void setup_engine(Trainer *t) {
    char mode[160];
    train_mode_describe(t->mode, t->backend, mode, sizeof mode);
    if (t->rank == 0) fprintf(stderr, "kvcpt train: allocating the training engine's buffers (%s)...\n", mode);
    t->engine = train_engine_create(t->backend, t->mode, &t->cfg, &t->model, &t->fsdp, t->comm);
    int accel = t->mode != TRAIN_HOST;
    if (t->rank == 0)
        fprintf(stderr, "kvcpt train: device %s, %s%s\n", mode, accel ? "recompute " : "",
                accel ? decoder_recompute_name((DecoderRecompute)t->cfg.recompute) : blas_core_summary());
}

/* Every rank builds the same full model (same seed or file), then keeps its pieces. */
static void setup_model(Trainer *t) {
    const TrainConfig *c = &t->cfg;
    DecoderConfig mc;
    model_source_config(&mc, c->model, "config: 'model'");
    int pretrained = strcmp(c->init, "pretrained") == 0;
    double t0 = now_seconds();
    if (t->rank == 0)
        fprintf(stderr, "kvcpt train: %s model %s (%lld layers, hidden %lld, vocab %lld)...\n",
                pretrained ? "loading the weights of" : "initialising at random the", c->model,
                (long long)mc.num_hidden_layers, (long long)mc.hidden_size, (long long)mc.vocab_size);
    decoder_create(&t->model, &mc);
    if (pretrained) model_source_load_fp32(c->model, &mc, &t->model.layout, t->model.params);
    else decoder_init_random(&t->model, (uint64_t)c->seed);
    if (t->rank == 0)
        fprintf(stderr, "kvcpt train: model ready in %.1f s: %lld parameters (%.1f MB in fp32)\n", now_seconds() - t0,
                (long long)t->model.layout.total, (double)t->model.layout.total * 4.0 / 1e6);
    if (c->mask) {
        RefreshMask m = train_config_mask(c);
        decoder_set_mask(&t->model, &m);
    }
    fsdp_init(&t->fsdp, t->comm, &t->model, (int)c->reshard_after_forward);
    setup_engine(t);
}

static void setup_optimizer(Trainer *t) {
    const TrainConfig *c = &t->cfg;
    OptimKind kind;
    KV_CHECK(optim_kind_parse(c->optim, &kind) == 0, "config: unknown optimizer '%s'", c->optim);
    t->opt = shard_optimizer_create(kind, &t->fsdp.plan, t->rank);
    int64_t per_epoch = loader_samples_per_epoch(t->loader) / c->global_batch;
    t->total_steps = c->steps;
    /* checked: a wrapped product would blame the split's size */
    if (c->steps == 0)
        KV_CHECK(!__builtin_mul_overflow(per_epoch, c->epochs, &t->total_steps),
                 "config: 'epochs' (%lld) x %lld steps per epoch overflows 64 bits; give fewer epochs, or 'steps'",
                 (long long)c->epochs, (long long)per_epoch);
    KV_CHECK(t->total_steps > 0, "config: the train split gives %lld samples, fewer than one global batch of %lld",
             (long long)loader_samples_per_epoch(t->loader), (long long)c->global_batch);
    LrDecay decay;
    KV_CHECK(lr_decay_parse(c->schedule, &decay) == 0, "config: unknown schedule '%s'", c->schedule);
    /* a shipped config's warm-up (20 steps) outlasts a short trial run
     * (--set steps=6): the warm-up is cut to the run, said, and recorded so
     * in the run's train_config.json */
    if (t->cfg.warmup_steps > t->total_steps) {
        if (t->rank == 0)
            fprintf(stderr,
                    "kvcpt train: note: warmup_steps=%lld is longer than the run's %lld steps; warming up over "
                    "all %lld (set warmup_steps to choose another)\n",
                    (long long)t->cfg.warmup_steps, (long long)t->total_steps, (long long)t->total_steps);
        t->cfg.warmup_steps = t->total_steps;
    }
    t->sched = (LrSchedule){c->lr, t->cfg.warmup_steps, t->total_steps, c->min_lr_frac, decay};
    lr_schedule_check(&t->sched);
}

/* The schedule in the words of its config keys, for the start-up line and
 * for --resume's comparison. */
static void schedule_text(const LrSchedule *s, char *buf, size_t n) {
    static const char *const names[] = {"constant", "linear", "cosine"};
    snprintf(buf, n, "steps=%lld lr=%g warmup_steps=%lld schedule=%s min_lr_frac=%g", (long long)s->total_steps,
             s->peak, (long long)s->warmup_steps, names[s->decay], s->final_frac);
}

/* Splits samples of T+1 tokens into inputs x[0..T-1] and targets x[1..T];
 * with loss_on=answers the targets that are not answers become -1 (no loss). */
static void split_sample(Trainer *t, int64_t b) {
    const uint32_t *s = t->sample + b * (t->T + 1);
    for (int64_t i = 0; i < t->T; i++) t->tokens[b * t->T + i] = (int32_t)s[i];
    if (t->answers) {
        answer_targets(t->answers, s, t->T, t->answer_class, t->targets + b * t->T);
        return;
    }
    for (int64_t i = 0; i < t->T; i++) t->targets[b * t->T + i] = (int32_t)s[i + 1];
}

static double peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0;
}

/* With loss_on=answers a micro-batch whose samples hold no answer within
 * their L + S + 1 tokens has no target at all: the backward pass has nothing
 * to differentiate. Said as such, naming the window. */
static void check_answers_in_window(const Trainer *t, const char *when) {
    if (!t->answers) return;
    int64_t n = t->cfg.micro_batch * t->T;
    for (int64_t i = 0; i < n; i++)
        if (t->targets[i] >= 0) return;
    die("loss_on=answers: %s: no answer falls in the sample window of L + S + 1 = %lld tokens (L=%lld, S=%lld) of "
        "any of its %lld sample%s; raise L or S so that a repeated marker's values fit, or train with loss_on=all",
        when, (long long)(t->T + 1), (long long)t->cfg.L, (long long)t->cfg.S, (long long)t->cfg.micro_batch,
        t->cfg.micro_batch == 1 ? "" : "s");
}

/* Micro-batch round * world + rank of this step: the samples before it
 * belong to lower ranks, those after it to higher ones. */
static void load_micro_batch(Trainer *t) {
    int64_t mb = t->cfg.micro_batch;
    loader_skip(t->loader, t->rank * mb);
    for (int64_t b = 0; b < mb; b++) {
        loader_next(t->loader, t->sample + b * (t->T + 1));
        split_sample(t, b);
    }
    loader_skip(t->loader, (t->world - 1 - t->rank) * mb);
    if (t->answers) {
        char when[64];
        snprintf(when, sizeof when, "step %lld", (long long)t->step + 1);
        check_answers_in_window(t, when);
    }
}

/* Start-up: this rank's first micro-batch, read by a loader of its own, so
 * a window that holds no answer is refused before any work. */
static void check_first_answers(Trainer *t) {
    if (!t->answers) return;
    Loader *l = loader_open(t->train_split, t->T + 1, (uint64_t)t->cfg.seed, 0, 1);
    loader_skip(l, t->rank * t->cfg.micro_batch);
    for (int64_t b = 0; b < t->cfg.micro_batch; b++) {
        loader_next(l, t->sample + b * (t->T + 1));
        split_sample(t, b);
    }
    loader_close(l);
    check_answers_in_window(t, "the first micro-batch");
}

/* Mean over the step's micro-batches of their losses, added in micro-batch order. */
static double step_loss(Trainer *t) {
    fsdp_gather_f64(&t->fsdp, t->round_loss, t->rounds, t->all_loss);
    double sum = 0;
    for (int64_t a = 0; a < t->rounds; a++)
        for (int r = 0; r < t->world; r++) sum += t->all_loss[r * t->rounds + a];
    return sum / (double)t->accum;
}

/* The step's AdamW settings: scheduled lr, clipping folded into the
 * gradient scale along with the mean over micro-batches. */
static AdamWHyper step_hyper(const Trainer *t, double norm) {
    const TrainConfig *c = &t->cfg;
    AdamWHyper h = adamw_hyper_default();
    h.lr = lr_schedule(&t->sched, t->step);
    h.beta1 = c->beta1, h.beta2 = c->beta2, h.eps = c->eps, h.weight_decay = c->weight_decay;
    h.grad_scale = (1.0 / (double)t->accum) * grad_clip_factor(norm, c->grad_clip);
    return h;
}

static void warn_skipped(Trainer *t) {
    if (t->rank == 0)
        warnf("step %lld: non-finite gradients; the update was skipped and the optimizer states left untouched",
              (long long)t->step);
    t->skipped_steps++;
}

/* Every micro-batch's backward adds d(its mean loss); the step uses the
 * mean over them. The engine steps the optimizer where it keeps the
 * parameters: this rank's shard on the host (CPU), the GPUs' shards or the
 * engine's own parameters (CUDA). */
float trainer_step(Trainer *t, double *grad_norm, double *lr) {
    TrainEngine *e = &t->engine;
    e->begin_step(e->ctx);
    for (int64_t a = 0; a < t->rounds; a++) {
        load_micro_batch(t);
        t->round_loss[a] = e->micro_batch(e->ctx, t->tokens, t->targets, t->cfg.micro_batch, t->T);
    }
    double loss = step_loss(t);
    t->step++;
    if (!isfinite(loss)) return (float)loss;
    /* the same sum on every rank: a non-finite norm skips the step everywhere */
    double norm = sqrt(e->grad_sum_squares(e->ctx)) / (double)t->accum;
    AdamWHyper h = step_hyper(t, norm);
    *lr = h.lr;
    if (!isfinite(norm) || e->optim_step(e->ctx, &h, t->step)) warn_skipped(t);
    *grad_norm = norm;
    return (float)loss;
}

/* Dev samples i = 0, 1, ... (a fixed-seed loader), sample i on rank i % world.
 * Every rank runs the same number of forwards: an engine that gathers
 * layers as it goes (the sharded CUDA one) makes each forward a collective,
 * so a rank with no sample left repeats its last input and drops the loss. */
double trainer_eval_dev(Trainer *t) {
    if (!t->dev_split || t->cfg.eval_batches == 0) return NAN;
    TrainEngine *e = &t->engine;
    e->begin_eval(e->ctx);
    Loader *l = loader_open(t->dev_split, t->T + 1, 0, 0, 1);
    int64_t n = loader_samples_per_epoch(l) < t->cfg.eval_batches ? loader_samples_per_epoch(l) : t->cfg.eval_batches;
    int64_t rounds = (n + t->world - 1) / t->world;
    double *mine = xcalloc((size_t)rounds + 1, sizeof(double)),
           *all = xmalloc(sizeof(double) * (size_t)(rounds * t->world + 1));
    for (int64_t a = 0; a < rounds; a++) {
        int have = a * t->world + t->rank < n;
        if (have) {
            loader_skip(l, t->rank);
            loader_next(l, t->sample);
            loader_skip(l, t->world - 1 - t->rank);
            split_sample(t, 0);
        }
        float loss = e->eval_forward(e->ctx, t->tokens, t->targets, 1, t->T);
        if (have) mine[a] = loss;
    }
    e->end_eval(e->ctx);
    fsdp_gather_f64(&t->fsdp, mine, rounds, all);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += all[(i % t->world) * rounds + i / t->world];
    loader_close(l);
    free(mine), free(all);
    return n > 0 ? sum / (double)n : NAN;
}

/* What a resumed run must share with the run that wrote the checkpoint: the
 * batch, the data order and the mask decide which tokens and keys each step
 * sees, so a change on --resume would silently make another run. Recorded in
 * each checkpoint as int64 values in this order. */
static const char *const RUN_IDENTITY_KEYS[] = {"global_batch", "seed",         "L", "S", "K", "pool_kernel", "mask",
                                                "mask_evict",   "mask_restride"};
#define N_RUN_IDENTITY (int)(sizeof RUN_IDENTITY_KEYS / sizeof RUN_IDENTITY_KEYS[0])
/* Checkpoints written before mask_evict and mask_restride existed record
 * the first 7 keys; they ran with both off (0). */
#define N_RUN_IDENTITY_BEFORE_EVICT 7

static void run_identity(const TrainConfig *c, int64_t id[N_RUN_IDENTITY]) {
    const int64_t v[N_RUN_IDENTITY] = {c->global_batch, c->seed,         c->L, c->S, c->K, c->pool_kernel, c->mask,
                                       c->mask_evict,   c->mask_restride};
    memcpy(id, v, sizeof v);
}

static void check_run_identity(const Trainer *t, const CkptReader *r, const char *dir) {
    int64_t bytes = 0, now[N_RUN_IDENTITY];
    const int64_t *was = ckpt_get_section(r, "run_identity", &bytes);
    int64_t n_was = bytes / (int64_t)sizeof(int64_t);
    if (!was || bytes % (int64_t)sizeof(int64_t) != 0 || n_was < N_RUN_IDENTITY_BEFORE_EVICT ||
        n_was > N_RUN_IDENTITY) {
        if (t->rank == 0) warnf("%s predates recorded run settings: they are not checked on --resume", dir);
        return;
    }
    run_identity(&t->cfg, now);
    for (int i = 0; i < N_RUN_IDENTITY; i++) {
        int64_t then = i < n_was ? was[i] : 0;
        KV_CHECK(then == now[i],
                 "--resume: '%s' is %lld but the checkpoint %s was written with %lld; resume with the same value, "
                 "or train into a new out",
                 RUN_IDENTITY_KEYS[i], (long long)now[i], dir, (long long)then);
    }
}

/* The data belongs to the run's identity too: --resume --set data=OTHER
 * would go on from the checkpoint's data position in other documents. The
 * section holds the manifest's SHA-256, a line break, and the resolved
 * directory; only the hash decides (a moved copy of the same data resumes). */
static void check_data_identity(const Trainer *t, const CkptReader *r, const char *dir) {
    int64_t bytes = 0;
    const char *was = ckpt_get_section(r, "data_identity", &bytes);
    if (!was) {
        if (t->rank == 0) warnf("%s predates the recorded data identity: the data is not checked on --resume", dir);
        return;
    }
    KV_CHECK(bytes > 65 && was[64] == '\n', "%s: the section 'data_identity' (%lld bytes) is malformed", dir,
             (long long)bytes);
    char then_path[4096];
    int64_t plen = bytes - 65 < (int64_t)sizeof then_path - 1 ? bytes - 65 : (int64_t)sizeof then_path - 1;
    memcpy(then_path, was + 65, (size_t)plen);
    then_path[plen] = '\0';
    KV_CHECK(memcmp(was, t->data_sha256, 64) == 0,
             "--resume: 'data' is '%s' (manifest SHA-256 %.16s...) but the checkpoint %s was written on '%s' (manifest "
             "SHA-256 %.16s...); resume with the same data, or train into a new out",
             t->data_realpath, t->data_sha256, dir, then_path, was);
}

/* The learning-rate schedule a checkpoint was written under, as 5 x 8
 * bytes: peak lr (double), warm-up steps, total steps, decay (int64),
 * final fraction (double). */
#define SCHEDULE_BYTES 40

static void schedule_pack(const LrSchedule *s, uint8_t out[SCHEDULE_BYTES]) {
    int64_t ints[3] = {s->warmup_steps, s->total_steps, (int64_t)s->decay};
    memcpy(out, &s->peak, 8);
    memcpy(out + 8, ints, 24);
    memcpy(out + 32, &s->final_frac, 8);
}

static LrSchedule schedule_unpack(const uint8_t in[SCHEDULE_BYTES]) {
    LrSchedule s;
    int64_t ints[3];
    memcpy(&s.peak, in, 8);
    memcpy(ints, in + 8, 24);
    memcpy(&s.final_frac, in + 32, 8);
    s.warmup_steps = ints[0], s.total_steps = ints[1], s.decay = (LrDecay)ints[2];
    return s;
}

/* --resume on another schedule (more steps, another lr or warm-up) would
 * go on at other learning rates than the checkpoint's run had planned: a
 * run of 12 steps resumed at step 6 with steps=24 jumps from lr 0.00075 to
 * 0.0015. Refused unless asked for (--allow-schedule-change), showing both. */
static void check_schedule(const Trainer *t, const CkptReader *r, const char *dir) {
    int64_t bytes = 0;
    const uint8_t *was = ckpt_get_section(r, "schedule", &bytes);
    if (!was || bytes != SCHEDULE_BYTES) {
        if (t->rank == 0) warnf("%s predates the recorded lr schedule: the schedule is not checked on --resume", dir);
        return;
    }
    uint8_t now[SCHEDULE_BYTES];
    schedule_pack(&t->sched, now);
    if (memcmp(was, now, SCHEDULE_BYTES) == 0) return;
    LrSchedule then = schedule_unpack(was);
    char a[256], b[256];
    schedule_text(&then, a, sizeof a);
    schedule_text(&t->sched, b, sizeof b);
    int64_t next = t->step + 1, d = next;
    /* the first step ahead whose lr changes (a bounded look: the schedules
     * may differ only in a key that changes no step, such as a decay past
     * the end) */
    while (d < next + 1000000 && lr_schedule(&t->sched, d) == lr_schedule(&then, d)) d++;
    char when[160] = "";
    if (lr_schedule(&t->sched, d) != lr_schedule(&then, d))
        snprintf(when, sizeof when, "; step %lld would run at lr %g instead of %g", (long long)d,
                 lr_schedule(&t->sched, d), lr_schedule(&then, d));
    if (!t->allow_schedule_change)
        die("--resume: the learning-rate schedule differs from the one the checkpoint %s was written under:\n"
            "  checkpoint: %s\n  this run:   %s\n(resuming at step %lld%s). Resume with the same settings, or pass "
            "--allow-schedule-change to go on under the new schedule",
            dir, a, b, (long long)next, when);
    if (t->rank == 0)
        fprintf(stderr,
                "kvcpt train: --allow-schedule-change: from step %lld on the new schedule\n  checkpoint: %s\n"
                "  this run:   %s\n",
                (long long)next, a, b);
}

/* Bytes under dir (one level: a checkpoint's rank files and manifest). */
static int64_t dir_bytes(const char *dir) {
    int64_t sum = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[4400];
        if (e->d_name[0] == '.') continue;
        path_fmt(p, sizeof p, "%s/%s", dir, e->d_name);
        int64_t n = file_size(p);
        if (n > 0) sum += n;
    }
    if (d) closedir(d);
    return sum;
}

void trainer_checkpoint(Trainer *t) {
    double t0 = now_seconds();
    t->engine.pull_state(t->engine.ctx, t->opt); /* the engine's parameters and states, where it steps them */
    CkptWriter w;
    ckpt_writer_begin(&w, t->cfg.out, t->step, t->rank, t->world);
    LoaderPosition pos = loader_position(t->loader);
    shard_ckpt_add(&w, &t->fsdp.plan, t->fsdp.master, t->opt);
    ckpt_add_section(&w, "step", &t->step, sizeof t->step);
    ckpt_add_section(&w, "data_pos", &pos, sizeof pos);
    ckpt_add_section(&w, "skipped", &t->skipped_steps, sizeof t->skipped_steps);
    int64_t id[N_RUN_IDENTITY];
    run_identity(&t->cfg, id);
    ckpt_add_section(&w, "run_identity", id, sizeof id);
    char data_id[64 + 1 + sizeof t->data_realpath];
    int n = snprintf(data_id, sizeof data_id, "%.64s\n%s", t->data_sha256, t->data_realpath);
    KV_CHECK(n > 0 && (size_t)n < sizeof data_id, "checkpoint: the data identity does not fit");
    ckpt_add_section(&w, "data_identity", data_id, n);
    uint8_t sched[SCHEDULE_BYTES];
    schedule_pack(&t->sched, sched);
    ckpt_add_section(&w, "schedule", sched, SCHEDULE_BYTES);
    shard_ckpt_commit(t->comm, &w, param_layout_hash(&t->model.layout), (int)t->cfg.keep_last);
    if (t->rank == 0) {
        char dir[4200];
        ckpt_step_dir(dir, sizeof dir, t->cfg.out, t->step);
        fprintf(stderr, "%skvcpt train: checkpoint step %lld written (%s, %.1f MB, %.1f s)\n",
                isatty(fileno(stderr)) ? "\n" : "", (long long)t->step, dir, (double)dir_bytes(dir) / 1e6,
                now_seconds() - t0);
    }
}

/* Any rank count's checkpoint: shards re-cut to this run's ranks. */
static void restore(Trainer *t, const char *dir) {
    uint64_t hash = param_layout_hash(&t->model.layout);
    shard_ckpt_restore(dir, &t->fsdp.plan, t->fsdp.master, t->opt, hash);
    CkptReader r;
    ckpt_reader_open(&r, dir, 0, ckpt_manifest_world(dir), hash);
    check_run_identity(t, &r, dir);
    check_data_identity(t, &r, dir);
    LoaderPosition pos;
    ckpt_read_section(&r, "step", &t->step, sizeof t->step);
    check_schedule(t, &r, dir);
    ckpt_read_section(&r, "data_pos", &pos, sizeof pos);
    ckpt_read_section(&r, "skipped", &t->skipped_steps, sizeof t->skipped_steps);
    loader_seek(t->loader, pos);
    ckpt_reader_close(&r);
}

/* Keeps the log lines of steps <= the resumed step: a resumed run's log
 * reads as if it had never stopped. */
static void truncate_log(const char *path, int64_t step) {
    if (access(path, F_OK) != 0) return;
    FILE *f = fopen_check(path, "r");
    char tmp[4300], line[65536];
    path_fmt(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen_check(tmp, "w");
    for (int64_t n = 1; fgets(line, sizeof line, f); n++) {
        /* a line that does not parse is corruption (two writers, a full
         * disk): said, never dropped silently */
        json_t *j = json_loads(line, 0, NULL);
        json_t *s = j ? json_object_get(j, "step") : NULL;
        KV_CHECK(json_is_integer(s),
                 "train: %s line %lld is not a log record; the log is damaged (move it aside to "
                 "resume)",
                 path, (long long)n);
        if (json_integer_value(s) <= step) KV_CHECK(fputs(line, o) >= 0, "train: cannot write '%s'", tmp);
        json_decref(j);
    }
    KV_CHECK(!ferror(f), "train: cannot read '%s'", path);
    fclose(f);
    fclose_check(o, tmp);
    rename_check(tmp, path);
}

/* The run's effective configuration. Not named config.json: that is the
 * Hugging Face model config, which model/ holds, and a run directory
 * given where a model is expected would pass for one. */
static void write_train_config(const Trainer *t) {
    char *js = train_config_to_json(&t->cfg), path[4200];
    path_fmt(path, sizeof path, "%s/" TRAIN_CONFIG_FILE, t->cfg.out);
    FILE *f = fopen_check(path, "w");
    fputs(js, f);
    fclose_check(f, path);
    free(js);
}

static void allocate_batches(Trainer *t) {
    int64_t mb = t->cfg.micro_batch;
    t->sample = xmalloc(sizeof(uint32_t) * (size_t)(mb * (t->T + 1)));
    t->tokens = xmalloc(sizeof(int32_t) * (size_t)(2 * mb * t->T));
    t->targets = t->tokens + mb * t->T;
    t->answer_class = xmalloc((size_t)(t->T + 1));
    t->round_loss = xmalloc(sizeof(double) * (size_t)(t->rounds + t->accum));
    t->all_loss = t->round_loss + t->rounds;
}

/* One trainer per run directory: a second one on the same out would
 * interleave log.jsonl lines and overwrite the other's checkpoints. The lock
 * is flock(2) on out/train.lock, released by the kernel when the process
 * ends however it ends; the file holds the owner's pid for the message. */
static int lock_run_dir(const char *out) {
    char path[4200];
    path_fmt(path, sizeof path, "%s/train.lock", out);
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) die("train: cannot open the run directory's lock '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char owner[32] = "";
        ssize_t n = pread(fd, owner, sizeof owner - 1, 0);
        owner[n > 0 ? n : 0] = '\0';
        owner[strcspn(owner, "\n")] = '\0';
        die("train: run directory '%s' is in use by another kvcpt train (pid %s); wait for it, or choose another "
            "out",
            out, owner[0] ? owner : "unknown");
    }
    /* the lock is on the file open here: one that an ending run unlinked
     * between this open and the flock is no lock on the name any more */
    struct stat held, named;
    if (fstat(fd, &held) != 0 || lstat(path, &named) != 0 || held.st_ino != named.st_ino ||
        held.st_dev != named.st_dev) {
        close(fd);
        return lock_run_dir(out);
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    KV_CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)len, 0) == len, "train: cannot write '%s'", path);
    return fd;
}

/* The files a run writes into out besides its lock ("config.json": the
 * name of train_config.json in runs of earlier versions). */
static const char *const RUN_FILES[] = {"log.jsonl",   TFEVENTS_FILE, "ckpt",    "model",    TRAIN_CONFIG_FILE,
                                        "config.json", "loss.png",    "loss.gp", "loss.dat", NULL};

/* Before anything is written: out must not be (or hold) the model the run
 * reads, since the export to out/model and out/config.json would replace
 * it; and a fresh run must not start over an earlier one (RunStart). */
static void check_run_dir(const TrainConfig *c, RunStart start) {
    char out[PATH_MAX], model[PATH_MAX];
    if (realpath(c->out, out) && realpath(c->model, model) && is_real_dir(model)) {
        size_t n = strlen(out);
        if (strncmp(model, out, n) == 0 && (model[n] == '\0' || model[n] == '/' || n == 1))
            die("train: 'out' (%s) is or contains the model directory '%s' the run reads; the run's export "
                "(out/model) would replace it: choose another out",
                c->out, c->model);
    }
    if (start != RUN_FRESH) return;
    char p[4400];
    for (int i = 0; RUN_FILES[i]; i++) {
        path_fmt(p, sizeof p, "%s/%s", c->out, RUN_FILES[i]);
        struct stat st;
        if (lstat(p, &st) == 0)
            die("train: '%s' holds an earlier run (%s); continue it with --resume, or pass --overwrite to remove "
                "it and start again, or choose another out",
                c->out, RUN_FILES[i]);
    }
}

/* --overwrite: called once everything else was set up, so a run refused
 * for any other reason leaves the earlier one whole. */
static void remove_earlier_run(const char *out) {
    char p[4400];
    int removed = 0;
    for (int i = 0; RUN_FILES[i]; i++) {
        path_fmt(p, sizeof p, "%s/%s", out, RUN_FILES[i]);
        struct stat st;
        if (lstat(p, &st) != 0) continue;
        remove_tree(p);
        removed = 1;
    }
    if (removed) fprintf(stderr, "kvcpt train: --overwrite: removed the earlier run in %s\n", out);
}

void trainer_setup(Trainer *t, const TrainConfig *cfg, RunStart start, int allow_schedule_change, Comm *comm) {
    memset(t, 0, sizeof *t);
    t->t_setup = now_seconds();
    t->allow_schedule_change = allow_schedule_change;
    t->cfg = *cfg;
    t->comm = comm;
    t->rank = comm_rank(comm), t->world = comm_world(comm);
    train_config_validate(&t->cfg, t->world);
    t->mode = train_mode_resolve(&t->cfg, t->rank, t->world, &t->backend);
    t->T = t->cfg.L + t->cfg.S;
    t->accum = t->cfg.global_batch / t->cfg.micro_batch;
    t->rounds = t->accum / t->world;
    t->lock_fd = -1;
    if (t->rank == 0) {
        make_dirs(t->cfg.out);
        t->lock_fd = lock_run_dir(t->cfg.out);
        check_run_dir(&t->cfg, start);
    }
    comm_barrier(comm);
    setup_model(t);
    open_data(t);
    if (t->rank == 0) t->final_model = final_model_prepare(&t->cfg, &t->model.cfg);
    setup_optimizer(t);
    allocate_batches(t);
    check_first_answers(t);
    t->flops_per_token = decoder_flops_per_token(&t->model, t->T);
    snprintf(t->log_path, sizeof t->log_path, "%s/log.jsonl", t->cfg.out);
    char dir[4200], events[4200];
    path_fmt(events, sizeof events, "%s/" TFEVENTS_FILE, t->cfg.out);
    int64_t at = 0;
    int resume = start == RUN_RESUME;
    if (resume && ckpt_find_latest(t->cfg.out, dir, sizeof dir, &at)) {
        restore(t, dir);
        if (t->rank == 0) {
            truncate_log(t->log_path, t->step);
            tfevents_truncate(events, t->step);
            fprintf(stderr, "kvcpt train: resumed from %s (step %lld, written by %d ranks, now %d)\n", dir,
                    (long long)t->step, ckpt_manifest_world(dir), t->world);
        }
    } else if (resume && t->rank == 0) {
        fprintf(stderr, "kvcpt train: --resume: no complete checkpoint in %s, starting fresh\n", t->cfg.out);
    }
    t->engine.push_state(t->engine.ctx, t->opt); /* where the engine steps: it holds the current copy from now */
    if (t->rank == 0) {
        if (start == RUN_OVERWRITE) remove_earlier_run(t->cfg.out);
        t->log = fopen_check(t->log_path, t->step > 0 ? "a" : "w");
        tfevents_open(&t->events, events, t->step > 0 ? "a" : "w");
        write_train_config(t);
        if (t->world > 1)
            fprintf(stderr, "kvcpt train: %d ranks (%s); this rank owns %lld of %lld parameters\n", t->world,
                    comm_backend_name(comm_backend(comm)), (long long)t->fsdp.plan.local_numel,
                    (long long)t->model.layout.total);
    }
    comm_barrier(comm); /* the log is truncated before anyone goes on */
    t->first_step = t->step;
    if (t->rank == 0) {
        char sched[256];
        schedule_text(&t->sched, sched, sizeof sched);
        fprintf(stderr,
                "kvcpt train: set-up done in %.1f s (peak RSS %.0f MB); steps %lld to %lld of %lld sequences x "
                "%lld tokens (%s optimizer; %s)\n",
                now_seconds() - t->t_setup, peak_rss_bytes() / 1e6, (long long)t->step + 1, (long long)t->total_steps,
                (long long)t->cfg.global_batch, (long long)t->T, t->cfg.optim, sched);
    }
}

/* The record's numbers (every numeric field but the step) as TensorBoard
 * scalars, under the names log.jsonl gives them. */
static void log_events(Trainer *t, json_t *record) {
    const char *tags[64];
    double values[64];
    int n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(record, key, v) {
        if (n < 64 && json_is_number(v) && strcmp(key, "step") != 0) tags[n] = key, values[n++] = json_number_value(v);
    }
    tfevents_scalars(&t->events, t->step, tags, values, n);
}

static void log_step(Trainer *t, float loss, double norm, double lr, double dt, double dev) {
    if (t->rank != 0) return;
    double tokens = (double)(t->cfg.global_batch * t->T), tps = tokens / dt;
    json_t *j = json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "step", (json_int_t)t->step, "loss", (double)loss, "lr",
                          lr, "grad_norm", norm, "tokens_per_s", tps, "gflops_per_s", t->flops_per_token * tps / 1e9,
                          "peak_rss_mb", peak_rss_bytes() / 1048576.0, "elapsed_s", now_seconds() - t->t_run);
    json_object_set_new(j, "mfu", json_null()); /* fp32 engines: no meaningful peak to divide by */
    t->engine.log_fields(t->engine.ctx, j);
    if (!isnan(dev)) json_object_set_new(j, "dev_loss", json_real(dev));
    /* the first record of every run, resumed ones too, says which BLAS computed
     * its numbers: another core type may give other bits */
    if (!t->blas_logged) json_object_set_new(j, "blas", blas_info_json());
    t->blas_logged = 1;
    char *s = json_dumps(j, JSON_COMPACT);
    /* checked: the resume tests compare this file, and a full disk must stop
     * the run, not truncate its record */
    KV_CHECK(s && fprintf(t->log, "%s\n", s) > 0 && fflush(t->log) == 0, "train: cannot write '%s': %s", t->log_path,
             strerror(errno));
    free(s);
    log_events(t, j);
    json_decref(j);
    /* the ETA from this process's mean step time: a resumed run's earlier
     * steps took place in another process */
    double elapsed = now_seconds() - t->t_run;
    char eta[32];
    clock_text(eta, sizeof eta, elapsed / (double)(t->step - t->first_step) * (double)(t->total_steps - t->step));
    if (isatty(fileno(stderr)) || t->step % t->cfg.log_interval == 0 || t->step == t->total_steps)
        fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.3g  |g| %.3g  %.0f tok/s  %.1f GFLOP/s  ETA %s%s",
                isatty(fileno(stderr)) ? "\r" : "", (long long)t->step, (long long)t->total_steps, loss, lr, norm, tps,
                t->flops_per_token * tps / 1e9, eta, isnan(dev) ? "" : "  dev ");
    if (!isnan(dev)) fprintf(stderr, "%.4f", dev);
    if (!isatty(fileno(stderr)) || !isnan(dev) || t->step == t->total_steps) fprintf(stderr, "\n");
}

/* Loss curves from log.jsonl (train and dev) into loss.png. */
static void plot_losses(const Trainer *t) {
    FILE *f = fopen(t->log_path, "r");
    if (!f) {
        warnf("the loss plot was not drawn: cannot read '%s': %s", t->log_path, strerror(errno));
        return;
    }
    int64_t cap = t->step + 1, n = 0, nd = 0;
    double *x = xmalloc(sizeof(double) * 4 * (size_t)cap), *y = x + cap, *xd = y + cap, *yd = xd + cap;
    char line[8192];
    while (fgets(line, sizeof line, f) && n < cap) {
        json_t *j = json_loads(line, 0, NULL);
        if (!j) continue;
        x[n] = (double)json_integer_value(json_object_get(j, "step"));
        y[n++] = json_real_value(json_object_get(j, "loss"));
        json_t *d = json_object_get(j, "dev_loss");
        if (d) xd[nd] = x[n - 1], yd[nd++] = json_real_value(d);
        json_decref(j);
    }
    fclose(f);
    char png[4200];
    path_fmt(png, sizeof png, "%s/loss.png", t->cfg.out);
    PlotSeries s[2] = {{"train", x, y, n}, {"dev", xd, yd, nd}};
    if (!plot_lines_png(png, "kvcpt train: loss", "step", "cross-entropy (nats)", s, nd > 0 ? 2 : 1, 0))
        warnf("the loss plot %s was not drawn (see the message above); the run and its model are complete", png);
    free(x);
}

/* Rank 0 writes the final model: every rank takes part in the gather. The
 * model goes first: the loss plot is a picture of log.jsonl, and a plot that
 * cannot be drawn must never cost the run its model. */
static void save_final_model(Trainer *t) {
    fsdp_gather_all(&t->fsdp);
    if (t->rank != 0) return;
    final_model_write(t->final_model, &t->model.layout, t->model.params);
    plot_losses(t);
}

int trainer_run(Trainer *t) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    t->t_run = now_seconds();
    int stop = 0;
    while (t->step < t->total_steps && !stop) {
        double t0 = now_seconds(), norm = NAN, lr = NAN;
        float loss = trainer_step(t, &norm, &lr);
        if (!isfinite(loss)) {
            if (t->rank == 0)
                fprintf(stderr,
                        "\nkvcpt train: error: loss is %f at step %lld; stopping. The last good checkpoint (if any) "
                        "in %s/ckpt is kept; hint: lower 'lr' or check the data\n",
                        loss, (long long)t->step, t->cfg.out);
            return 1;
        }
        int eval_now = t->cfg.eval_interval > 0 && t->step % t->cfg.eval_interval == 0;
        double dev = eval_now || t->step == t->total_steps ? trainer_eval_dev(t) : NAN;
        log_step(t, loss, norm, lr, now_seconds() - t0, dev);
        stop = (int)comm_max_i64(t->comm, stop_signal); /* a signal on any rank stops all at the same step */
        if (t->cfg.ckpt_interval > 0 && t->step % t->cfg.ckpt_interval == 0 && t->step < t->total_steps && !stop)
            trainer_checkpoint(t);
    }
    trainer_checkpoint(t);
    if (stop) {
        if (t->rank == 0)
            fprintf(stderr, "\nkvcpt train: %s received: checkpoint written at step %lld; continue with --resume\n",
                    stop == SIGTERM ? "SIGTERM" : "SIGINT", (long long)t->step);
        return 128 + stop;
    }
    save_final_model(t);
    if (t->rank == 0)
        fprintf(stderr,
                "kvcpt train: done, %lld steps (%lld skipped) in %.1f s on %d rank%s; run directory %s (final model in "
                "model/)\n",
                (long long)t->step, (long long)t->skipped_steps, now_seconds() - t->t_run, t->world,
                t->world > 1 ? "s" : "", t->cfg.out);
    return 0;
}

void trainer_finish(Trainer *t) {
    if (t->log) fclose(t->log);
    tfevents_close(&t->events);
    if (t->lock_fd >= 0) {
        /* an orderly end (done, or stopped by a signal after its checkpoint)
         * leaves no lock file behind; removed while still held, so no other
         * trainer can have taken it (one that opened it meanwhile finds the
         * name gone and opens it anew, lock_run_dir) */
        char path[4200];
        path_fmt(path, sizeof path, "%s/train.lock", t->cfg.out);
        unlink(path);
        close(t->lock_fd); /* releases the run directory */
    }
    loader_close(t->loader);
    data_split_close(t->train_split);
    if (t->dev_split) data_split_close(t->dev_split);
    optim_free(t->opt);
    t->engine.free(t->engine.ctx);
    fsdp_free(&t->fsdp, &t->model);
    decoder_free(&t->model);
    free(t->sample);
    free(t->tokens);
    free(t->round_loss);
    free(t->answer_class);
    final_model_free(t->final_model);
}
