#include "trainer.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../checkpoints/ckpt.h"
#include "../checkpoints/model_file.h"
#include "../common/plot.h"
#include "../common/util.h"
#include "../optim/clip.h"

static volatile sig_atomic_t stop_signal = 0;
static void on_signal(int sig) { stop_signal = sig; }

static void open_data(Trainer *t) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/train", t->cfg.data);
    t->train_split = data_split_open(dir);
    snprintf(dir, sizeof dir, "%s/dev", t->cfg.data);
    t->dev_split = access(dir, F_OK) == 0 ? data_split_open(dir) : NULL;
    t->loader = loader_open(t->train_split, t->T + 1, (uint64_t)t->cfg.seed, 0, 1);
    KV_CHECK(loader_samples_per_epoch(t->loader) > 0,
             "data '%s': no training document has the %lld tokens a sample needs (L + S + 1); prepare with "
             "--min-tokens %lld or lower L",
             t->cfg.data, (long long)(t->T + 1), (long long)(t->T + 1));
}

static void setup_model(Trainer *t) {
    const TrainConfig *c = &t->cfg;
    LlamaConfig mc;
    config_load(&mc, c->model);
    llama_create(&t->model, &mc);
    if (strcmp(c->init, "pretrained") == 0) model_file_load_fp32(c->model, &mc, &t->model.layout, t->model.params);
    else llama_init_random(&t->model, (uint64_t)c->seed);
    if (c->mask) {
        RefreshMask m = {1, c->L, c->K, c->pool_kernel, group_agg_parse(c->group_agg, "config 'group_agg'")};
        llama_set_mask(&t->model, &m, c->S);
    }
}

static void setup_optimizer(Trainer *t) {
    const TrainConfig *c = &t->cfg;
    OptimKind kind;
    KV_CHECK(optim_kind_parse(c->optim, &kind) == 0, "config: unknown optimizer '%s'", c->optim);
    optim_segments_from_layout(&t->segs, &t->model.layout, 0, t->model.layout.total);
    t->opt = optim_create(kind, t->segs.offset, t->segs.numel, t->segs.n);
    int64_t per_epoch = loader_samples_per_epoch(t->loader) / c->global_batch;
    t->total_steps = c->steps > 0 ? c->steps : per_epoch * c->epochs;
    KV_CHECK(t->total_steps > 0, "config: the train split gives %lld samples, fewer than one global batch of %lld",
             (long long)loader_samples_per_epoch(t->loader), (long long)c->global_batch);
    LrDecay decay;
    KV_CHECK(lr_decay_parse(c->schedule, &decay) == 0, "config: unknown schedule '%s'", c->schedule);
    t->sched = (LrSchedule){c->lr, c->warmup_steps, t->total_steps, c->min_lr_frac, decay};
    lr_schedule_check(&t->sched);
}

/* Splits samples of T+1 tokens into inputs x[0..T-1] and targets x[1..T]. */
static void split_sample(Trainer *t, int64_t b) {
    const uint32_t *s = t->sample + b * (t->T + 1);
    for (int64_t i = 0; i < t->T; i++) {
        t->tokens[b * t->T + i] = (int32_t)s[i];
        t->targets[b * t->T + i] = (int32_t)s[i + 1];
    }
}

static double peak_rss_bytes(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0;
}

float trainer_step(Trainer *t, double *grad_norm, double *lr) {
    const TrainConfig *c = &t->cfg;
    int64_t mb = c->micro_batch;
    llama_zero_grad(&t->model);
    double loss_sum = 0.0;
    for (int64_t a = 0; a < t->accum; a++) {
        for (int64_t b = 0; b < mb; b++) {
            loader_next(t->loader, t->sample + b * (t->T + 1));
            split_sample(t, b);
        }
        float loss = llama_forward(&t->model, t->tokens, t->targets, mb, t->T);
        if (!isfinite(loss)) return loss;
        loss_sum += loss;
        llama_backward(&t->model);
    }
    t->step++;
    /* every micro-batch's backward adds d(its mean loss); the step uses the mean over them */
    double inv = 1.0 / (double)t->accum;
    double norm = grad_global_norm(t->model.grads, t->model.layout.total) * inv;
    AdamWHyper h = adamw_hyper_default();
    h.lr = lr_schedule(&t->sched, t->step);
    h.beta1 = c->beta1, h.beta2 = c->beta2, h.eps = c->eps, h.weight_decay = c->weight_decay;
    h.grad_scale = inv * grad_clip_factor(norm, c->grad_clip);
    if (!isfinite(norm) || optim_step(t->opt, t->model.params, t->model.grads, &h, t->step) != 0) {
        warnf("step %lld: non-finite gradients; the update was skipped and the optimizer states left untouched",
              (long long)t->step);
        t->skipped_steps++;
    }
    *grad_norm = norm, *lr = h.lr;
    return (float)(loss_sum * inv);
}

double trainer_eval_dev(Trainer *t) {
    if (!t->dev_split) return NAN;
    /* the same dev samples every time: a fresh loader with a fixed seed */
    Loader *l = loader_open(t->dev_split, t->T + 1, 0, 0, 1);
    int64_t n = loader_samples_per_epoch(l) < t->cfg.eval_batches ? loader_samples_per_epoch(l) : t->cfg.eval_batches;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        loader_next(l, t->sample);
        split_sample(t, 0);
        sum += llama_forward(&t->model, t->tokens, t->targets, 1, t->T);
    }
    loader_close(l);
    return n > 0 ? sum / (double)n : NAN;
}

/* Optimizer state as bytes, through its own FILE-based serialiser. */
static char *optim_bytes(const Optimizer *o, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) die("cannot open a memory stream for the optimizer state");
    optim_save(o, f, "<optimizer state>");
    fclose(f);
    return buf;
}

void trainer_checkpoint(Trainer *t) {
    CkptWriter w;
    ckpt_writer_begin(&w, t->cfg.out, t->step, 0, 1);
    int64_t range[2] = {0, t->model.layout.total};
    size_t olen;
    char *ob = optim_bytes(t->opt, &olen);
    LoaderPosition pos = loader_position(t->loader);
    ckpt_add_section(&w, "params_range", range, sizeof range);
    ckpt_add_section(&w, "params", t->model.params, (int64_t)sizeof(float) * t->model.layout.total);
    ckpt_add_section(&w, "optim", ob, (int64_t)olen);
    ckpt_add_section(&w, "step", &t->step, sizeof t->step);
    ckpt_add_section(&w, "data_pos", &pos, sizeof pos);
    ckpt_add_section(&w, "skipped", &t->skipped_steps, sizeof t->skipped_steps);
    ckpt_writer_commit(&w, param_layout_hash(&t->model.layout), (int)t->cfg.keep_last);
    free(ob);
}

static void restore(Trainer *t, const char *dir) {
    CkptReader r;
    ckpt_reader_open(&r, dir, 0, 1, param_layout_hash(&t->model.layout));
    int64_t range[2];
    ckpt_read_section(&r, "params_range", range, sizeof range);
    KV_CHECK(range[0] == 0 && range[1] == t->model.layout.total,
             "%s: checkpoint holds parameters [%lld, %lld), this model has %lld", dir, (long long)range[0],
             (long long)range[1], (long long)t->model.layout.total);
    ckpt_read_section(&r, "params", t->model.params, (int64_t)sizeof(float) * t->model.layout.total);
    int64_t olen;
    const void *ob = ckpt_get_section(&r, "optim", &olen);
    KV_CHECK(ob, "%s: checkpoint has no 'optim' section", dir);
    FILE *f = fmemopen((void *)ob, (size_t)olen, "rb");
    if (!f) die("%s: cannot read the optimizer section", dir);
    optim_load(t->opt, f, dir);
    fclose(f);
    LoaderPosition pos;
    ckpt_read_section(&r, "step", &t->step, sizeof t->step);
    ckpt_read_section(&r, "data_pos", &pos, sizeof pos);
    ckpt_read_section(&r, "skipped", &t->skipped_steps, sizeof t->skipped_steps);
    loader_seek(t->loader, pos);
    ckpt_reader_close(&r);
}

/* Keeps the log lines of steps <= the resumed step: a resumed run's log
 * reads as if it had never stopped. */
static void truncate_log(const char *path, int64_t step) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    char tmp[4300], line[8192];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *o = fopen_check(tmp, "w");
    while (fgets(line, sizeof line, f)) {
        json_t *j = json_loads(line, 0, NULL);
        json_t *s = j ? json_object_get(j, "step") : NULL;
        if (s && json_integer_value(s) <= step) fputs(line, o);
        json_decref(j);
    }
    fclose(f);
    fclose_check(o, tmp);
    rename_check(tmp, path);
}

void trainer_setup(Trainer *t, const TrainConfig *cfg, int resume) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    train_config_validate(&t->cfg, 1);
    t->T = t->cfg.L + t->cfg.S;
    t->accum = t->cfg.global_batch / t->cfg.micro_batch;
    make_dirs(t->cfg.out);
    setup_model(t);
    open_data(t);
    setup_optimizer(t);
    int64_t mb = t->cfg.micro_batch;
    t->sample = xmalloc(sizeof(uint32_t) * (size_t)(mb * (t->T + 1)));
    t->tokens = xmalloc(sizeof(int32_t) * (size_t)(2 * mb * t->T));
    t->targets = t->tokens + mb * t->T;
    t->flops_per_token = llama_flops_per_token(&t->model, t->T);
    snprintf(t->log_path, sizeof t->log_path, "%s/log.jsonl", t->cfg.out);
    char dir[4200];
    int64_t at = 0;
    if (resume && ckpt_find_latest(t->cfg.out, dir, sizeof dir, &at)) {
        restore(t, dir);
        truncate_log(t->log_path, t->step);
        fprintf(stderr, "kvcpt train: resumed from %s (step %lld)\n", dir, (long long)t->step);
    } else if (resume) {
        fprintf(stderr, "kvcpt train: --resume: no complete checkpoint in %s, starting fresh\n", t->cfg.out);
    }
    t->log = fopen_check(t->log_path, t->step > 0 ? "a" : "w");
    char *js = train_config_to_json(&t->cfg), path[4200];
    snprintf(path, sizeof path, "%s/config.json", t->cfg.out);
    FILE *f = fopen_check(path, "w");
    fputs(js, f);
    fclose_check(f, path);
    free(js);
}

static void log_step(Trainer *t, float loss, double norm, double lr, double dt, double dev) {
    double tokens = (double)(t->cfg.global_batch * t->T), tps = tokens / dt;
    json_t *j = json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "step", (json_int_t)t->step, "loss", (double)loss, "lr",
                          lr, "grad_norm", norm, "tokens_per_s", tps, "gflops_per_s", t->flops_per_token * tps / 1e9,
                          "peak_rss_mb", peak_rss_bytes() / 1048576.0, "elapsed_s", now_seconds() - t->t_run);
    json_object_set_new(j, "mfu", json_null()); /* CPU: no meaningful peak to divide by */
    if (!isnan(dev)) json_object_set_new(j, "dev_loss", json_real(dev));
    char *s = json_dumps(j, JSON_COMPACT);
    fprintf(t->log, "%s\n", s);
    fflush(t->log);
    free(s);
    json_decref(j);
    if (isatty(fileno(stderr)) || t->step % t->cfg.log_interval == 0 || t->step == t->total_steps)
        fprintf(stderr, "%sstep %lld/%lld  loss %.4f  lr %.3g  |g| %.3g  %.0f tok/s  %.1f GFLOP/s%s%s",
                isatty(fileno(stderr)) ? "\r" : "", (long long)t->step, (long long)t->total_steps, loss, lr, norm, tps,
                t->flops_per_token * tps / 1e9, isnan(dev) ? "" : "  dev ", "");
    if (!isnan(dev)) fprintf(stderr, "%.4f", dev);
    if (!isatty(fileno(stderr)) || !isnan(dev) || t->step == t->total_steps) fprintf(stderr, "\n");
}

/* Loss curves from log.jsonl (train and dev) into loss.png. */
static void plot_losses(const Trainer *t) {
    FILE *f = fopen(t->log_path, "r");
    if (!f) return;
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
    snprintf(png, sizeof png, "%s/loss.png", t->cfg.out);
    PlotSeries s[2] = {{"train", x, y, n}, {"dev", xd, yd, nd}};
    plot_lines_png(png, "kvcpt train: loss", "step", "cross-entropy (nats)", s, nd > 0 ? 2 : 1);
    free(x);
}

int trainer_run(Trainer *t) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    t->t_run = now_seconds();
    while (t->step < t->total_steps && !stop_signal) {
        double t0 = now_seconds(), norm, lr;
        float loss = trainer_step(t, &norm, &lr);
        if (!isfinite(loss)) {
            fprintf(stderr, "\nkvcpt train: error: loss is %f at step %lld; stopping. The last good checkpoint (if any) "
                            "in %s/ckpt is kept; hint: lower 'lr' or check the data\n",
                    loss, (long long)(t->step + 1), t->cfg.out);
            return 1;
        }
        int eval_now = t->cfg.eval_interval > 0 && t->step % t->cfg.eval_interval == 0;
        double dev = eval_now || t->step == t->total_steps ? trainer_eval_dev(t) : NAN;
        log_step(t, loss, norm, lr, now_seconds() - t0, dev);
        if (t->cfg.ckpt_interval > 0 && t->step % t->cfg.ckpt_interval == 0 && t->step < t->total_steps)
            trainer_checkpoint(t);
    }
    trainer_checkpoint(t);
    if (stop_signal) {
        fprintf(stderr, "\nkvcpt train: %s received: checkpoint written at step %lld; continue with --resume\n",
                stop_signal == SIGTERM ? "SIGTERM" : "SIGINT", (long long)t->step);
        return 128 + stop_signal;
    }
    plot_losses(t);
    char model_dir[4200];
    snprintf(model_dir, sizeof model_dir, "%s/model", t->cfg.out);
    model_file_save_native(model_dir, &t->model.cfg, &t->model.layout, t->model.params, KV_F32);
    fprintf(stderr, "kvcpt train: done, %lld steps (%lld skipped) in %.1f s; run directory %s (final model in model/)\n", (long long)t->step,
            (long long)t->skipped_steps, now_seconds() - t->t_run, t->cfg.out);
    return 0;
}

void trainer_finish(Trainer *t) {
    if (t->log) fclose(t->log);
    loader_close(t->loader);
    data_split_close(t->train_split);
    if (t->dev_split) data_split_close(t->dev_split);
    optim_free(t->opt);
    optim_segments_free(&t->segs);
    llama_free(&t->model);
    free(t->sample);
    free(t->tokens);
}
