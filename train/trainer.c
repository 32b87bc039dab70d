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
