#include <math.h>
#include "train_config.h"

#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/backend.h"
#include "../common/byte_size.h"
#include "../common/util.h"
#include "../data/utf8.h"
#include "../model/attn_impl.h"
#include "../model/recompute.h"
#include "../parallel/comm.h"

/* K_ENUM: a named setting kept as an int64 enum value; JSON gives its
 * name, or an integer (or boolean) that the parser reads as its text, so a
 * key that was an integer before it had names still loads. */
typedef enum { K_STR, K_INT, K_NUM, K_ENUM } KeyType;

typedef struct {
    const char *key;
    KeyType type;
    size_t offset, size; /* size for strings */
    const char *dflt, *help;
    int64_t (*parse)(const char *v, const char *origin); /* K_ENUM: text -> value (dies naming origin) */
    const char *(*name)(int64_t v);                      /* K_ENUM: value -> its name */
} Key;

static int64_t recompute_parse(const char *v, const char *origin) { return decoder_recompute_parse(v, origin); }
static const char *recompute_name(int64_t v) { return decoder_recompute_name((DecoderRecompute)v); }
static int64_t attn_impl_parse(const char *v, const char *origin) {
    char what[4200];
    snprintf(what, sizeof what, "%s: 'attn_impl'", origin);
    return decoder_attn_impl_parse(v, what);
}
static const char *attn_impl_name(int64_t v) { return decoder_attn_impl_name((DecoderAttnImpl)v); }

#define S_(f, d, h) {#f, K_STR, offsetof(TrainConfig, f), sizeof(((TrainConfig *)0)->f), d, h, NULL, NULL}
#define I_(f, d, h) {#f, K_INT, offsetof(TrainConfig, f), 0, d, h, NULL, NULL}
#define N_(f, d, h) {#f, K_NUM, offsetof(TrainConfig, f), 0, d, h, NULL, NULL}
#define E_(f, d, parse, name, h) {#f, K_ENUM, offsetof(TrainConfig, f), 0, d, h, parse, name}
static const Key keys[] = {
    S_(model, "small",
       "preset name, config.json, Hugging Face model directory (or an older native one), or llama.cpp "
       "GGUF file (read in place)"),
    S_(init, "random", "random (pretraining from scratch) | pretrained (load the model's weights: CPT)"),
    S_(data, "", "prepared data directory (kvcpt prepare --out): its train split, and its dev split when it has one"),
    S_(out, "runs/train",
       "run directory: log.jsonl, TensorBoard events, train_config.json, checkpoints, loss.png, the "
       "final model in model/ (Hugging Face safetensors with the data's tokenizer)"),
    S_(model_shard_size, "5GB",
       "largest safetensors file of out/model; a larger model is split into shards listed by "
       "model.safetensors.index.json (5GB = 5e9 bytes, 2GiB = 2^31)"),
    S_(optim, "adamw8bit", "adamw8bit | adamw"),
    S_(schedule, "linear", "linear | cosine | constant (after warm-up)"),
    S_(group_agg, "max", "GQA aggregation of selection scores: max | mean | first"),
    S_(device, "auto", "auto | cpu | cuda"),
    S_(loss_on, "all",
       "all: every next token; answers: only the targets the data's manifest marks as answers "
       "(synthetic mqar; the rest are random, and their loss is noise)"),
    I_(L, "8192", "prefill length: positions < L attend causally"),
    I_(S, "50", "refresh positions after the prefill; sequences are L + S tokens"),
    I_(K, "2048", "kept prefill keys per KV head for positions >= L"),
    I_(pool_kernel, "7", "selection max-pool kernel (odd)"),
    I_(mask, "1", "1: RefreshKV mask (CPT); 0: plain causal attention (pretraining)"),
    I_(mask_evict, "0",
       "1: positions >= L hold the eval cache's budget: kept + local keys <= K, the lowest-scored "
       "kept key evicted first, then the oldest local ones"),
    I_(mask_restride, "0",
       "r > 0: positions L-1 + r*m (m >= 1) attend to every key and re-select the kept keys from "
       "their own attention, as eval --refresh-fixed r; 0: off"),
    I_(global_batch, "64", "sequences per optimizer step, over all ranks"),
    I_(micro_batch, "1", "sequences per forward/backward on one rank"),
    I_(steps, "0", "optimizer steps; 0 = as many as `epochs` of the train split give"),
    I_(epochs, "1", "passes over the train split when steps = 0"),
    I_(warmup_steps, "20", "linear warm-up steps (cut to the run's steps when longer, with a note)"),
    I_(eval_interval, "0", "dev-split loss every N steps (0: only at the end)"),
    I_(eval_batches, "4",
       "dev sequences per evaluation (0: no dev evaluation; none either when the data has no dev "
       "documents)"),
    I_(ckpt_interval, "0", "checkpoint every N steps (0: only at the end and on signals)"),
    I_(keep_last, "2", "complete checkpoints kept"),
    E_(recompute, "none", recompute_parse, recompute_name,
       "CUDA activation checkpointing: none (keep every activation) | attn (keep each layer's attention half, "
       "rerun the MLP's norm, gate|up product and swiglu in backward) | full (keep each layer's input, rerun its "
       "forward in backward); 0 and 1 mean none and full"),
    E_(attn_impl, "auto", attn_impl_parse, attn_impl_name,
       "CUDA, bf16 and bf16sr: attention on tensor cores (mma; head dims 16, 32, 64, 128) or on the CUDA-core kernels "
       "the fp32 engine runs (cuda-core), or cuDNN's fused attention (cudnn; not yet validated on a GPU, never "
       "chosen by auto); auto: $KVCPT_ATTN when set, else mma where the head dim allows"),
    S_(precision, "fp32",
       "CUDA: fp32 | bf16 (bf16 device matrices from an fp32 master sharded over the GPUs) | bf16sr "
       "(bf16 matrices only, stochastic rounding; one rank)"),
    I_(optim_device, "0",
       "CUDA, one rank: AdamW steps the engine's own fp32 parameters, no separate master (1), or "
       "a master shard beside them (0)"),
    I_(share_device, "0",
       "CUDA: more ranks on a node than visible GPUs share them round-robin (1), or are refused (0: one GPU "
       "per rank)"),
    I_(reshard_after_forward, "1",
       "sharding: gather a layer again in backward (1; CUDA: layers streamed through two "
       "slots) or keep every gathered unit for the step (0; CUDA: the whole model on each GPU)"),
    I_(log_interval, "1", "log line every N steps"),
    I_(seed, "1234", "random init, data order"),
    N_(lr, "5e-6", "peak learning rate"),
    N_(min_lr_frac, "0", "final learning rate as a fraction of lr"),
    N_(weight_decay, "0", "decoupled weight decay"),
    N_(beta1, "0.9", "AdamW beta1"),
    N_(beta2, "0.999", "AdamW beta2"),
    N_(eps, "1e-8", "AdamW epsilon"),
    N_(grad_clip, "1.0", "global gradient-norm clip (0: off)"),
    N_(comm_timeout, COMM_DEFAULT_TIMEOUT_TEXT,
       "several ranks: seconds a collective may wait before the job ends naming the ranks that "
       "never arrived (0: forever)"),
};
#define N_KEYS (int)(sizeof keys / sizeof keys[0])

static const Key *find_key(const char *k) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(keys[i].key, k) == 0) return &keys[i];
    return NULL;
}

static void set_from_string(TrainConfig *c, const Key *k, const char *v, const char *origin) {
    char *p = (char *)c + k->offset, *end = NULL;
    errno = 0;
    if (k->type == K_STR) {
        if (strlen(v) >= k->size) die("%s: value of '%s' is too long", origin, k->key);
        strcpy(p, v);
    } else if (k->type == K_ENUM) {
        *(int64_t *)p = k->parse(v, origin);
    } else if (k->type == K_INT) {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) die("%s: '%s' must be an integer (got '%s')", origin, k->key, v);
        *(int64_t *)p = x;
    } else {
        double x = strtod(v, &end);
        if (errno || end == v || *end) die("%s: '%s' must be a number (got '%s')", origin, k->key, v);
        *(double *)p = x;
    }
}

void train_config_defaults(TrainConfig *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < N_KEYS; i++) set_from_string(c, &keys[i], keys[i].dflt, "defaults");
}

void train_config_apply_file(TrainConfig *c, const char *path) {
    char *text = read_text_file(path, NULL);
    train_config_apply_json(c, text, path);
    free(text);
}

void train_config_apply_json(TrainConfig *c, const char *text, const char *origin) {
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    if (!root) die("%s: invalid JSON at line %d column %d: %s", origin, err.line, err.column, err.text);
    if (!json_is_object(root)) die("%s: the config must be a JSON object", origin);
    const char *name;
    json_t *v;
    json_object_foreach(root, name, v) {
        if (name[0] == '_') continue; /* "_comment" style keys document configs */
        const Key *k = find_key(name);
        if (!k) die("%s: unknown config key '%s'; see 'kvcpt train --help' for the keys", origin, name);
        char buf[64];
        if (k->type == K_STR || (k->type == K_ENUM && json_is_string(v))) {
            if (!json_is_string(v)) die("%s: '%s' must be a string", origin, name);
            set_from_string(c, k, json_string_value(v), origin);
            continue;
        }
        if (json_is_boolean(v) && k->type != K_NUM) snprintf(buf, sizeof buf, "%d", json_is_true(v));
        else if (json_is_integer(v)) snprintf(buf, sizeof buf, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v) && k->type == K_NUM) snprintf(buf, sizeof buf, "%.17g", json_real_value(v));
        else
            die("%s: '%s' must be %s", origin, name,
                k->type == K_INT    ? "an integer"
                : k->type == K_ENUM ? "a name or an integer"
                                    : "a number");
        set_from_string(c, k, buf, origin);
    }
    json_decref(root);
}

void train_config_apply_set(TrainConfig *c, const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq) die("--set expects key=value (got '%s')", kv);
    char key[64];
    size_t n = (size_t)(eq - kv);
    if (n >= sizeof key) die("--set: key too long in '%s'", kv);
    memcpy(key, kv, n);
    key[n] = '\0';
    const Key *k = find_key(key);
    if (!k) die("--set: unknown config key '%s'; see 'kvcpt train --help'", key);
    set_from_string(c, k, eq + 1, "--set");
}

/* Largest eval_batches accepted: the evaluation takes min(eval_batches, the
 * dev split's samples), so a larger count only means "all of them"; the bound
 * keeps a typo or a wrapped value from passing for a count. */
#define EVAL_BATCHES_MAX ((int64_t)1 << 30)

/* String values go into the run's train_config.json, which is UTF-8 JSON: a value
 * that is not UTF-8 would be dropped from it, so it is refused here naming
 * the key. A control character in 'out' would break the paths written into
 * the loss plot's script and the log lines naming the run directory. */
static void check_strings(const TrainConfig *c) {
    for (int i = 0; i < N_KEYS; i++) {
        if (keys[i].type != K_STR) continue;
        const char *v = (const char *)c + keys[i].offset;
        int64_t bad = utf8_first_invalid((const uint8_t *)v, strlen(v));
        KV_CHECK(bad < 0,
                 "config: '%s' is not valid UTF-8 (byte 0x%02x at offset %lld of '%s'); the run's "
                 "train_config.json could not record it",
                 keys[i].key, (unsigned)(uint8_t)v[bad], (long long)bad, v);
    }
    for (const char *p = c->out; *p; p++) {
        unsigned char ch = (unsigned char)*p;
        KV_CHECK(ch >= 0x20 && ch != 0x7f,
                 "config: 'out' holds a control character (0x%02x%s) at offset %lld; "
                 "choose a run directory name without one",
                 ch,
                 ch == '\n'   ? ", a line break"
                 : ch == '\r' ? ", a carriage return"
                 : ch == '\t' ? ", a tab"
                              : "",
                 (long long)(p - c->out));
    }
}

static int one_of(const char *v, const char *a, const char *b, const char *c3) {
    return strcmp(v, a) == 0 || strcmp(v, b) == 0 || (c3 && strcmp(v, c3) == 0);
}

RefreshMask train_config_mask(const TrainConfig *c) {
    if (!c->mask) return refresh_mask_off();
    return (RefreshMask){.enabled = 1,
                         .L = c->L,
                         .K = c->K,
                         .pool_kernel = c->pool_kernel,
                         .agg = group_agg_parse(c->group_agg, "config 'group_agg'"),
                         .evict = (int)c->mask_evict,
                         .restride = c->mask_restride,
                         .S = c->S};
}

void train_config_validate(const TrainConfig *c, int world) {
    KV_CHECK(one_of(c->init, "random", "pretrained", NULL), "config: 'init' must be random or pretrained (got '%s')",
             c->init);
    KV_CHECK(one_of(c->optim, "adamw8bit", "adamw", NULL), "config: 'optim' must be adamw8bit or adamw (got '%s')",
             c->optim);
    KV_CHECK(one_of(c->schedule, "linear", "cosine", "constant"),
             "config: 'schedule' must be linear, cosine or constant");
    KV_CHECK(one_of(c->group_agg, "max", "mean", "first"), "config: 'group_agg' must be max, mean or first");
    KV_CHECK(one_of(c->loss_on, "all", "answers", NULL), "config: 'loss_on' must be all or answers (got '%s')",
             c->loss_on);
    KV_CHECK(c->data[0], "config: 'data' (the prepared data directory) is required");
    KV_CHECK(c->out[0], "config: 'out' (the run directory) is required");
    int64_t shard_bytes;
    KV_CHECK(byte_size_parse(c->model_shard_size, &shard_bytes) == 0,
             "config: 'model_shard_size' must be a size such as 5GB, 500MB or 2GiB (got '%s')", c->model_shard_size);
    check_strings(c);
    KV_CHECK(c->L >= 1 && c->S >= 0, "config: 'L' must be >= 1 and 'S' >= 0 (got L=%lld S=%lld)", (long long)c->L,
             (long long)c->S);
    KV_CHECK(!c->mask || (c->K >= 1 && c->K <= c->L), "config: 'K' (%lld) must be in [1, L=%lld]", (long long)c->K,
             (long long)c->L);
    KV_CHECK(c->pool_kernel >= 1 && c->pool_kernel % 2 == 1, "config: 'pool_kernel' must be odd and >= 1");
    KV_CHECK(c->mask_evict == 0 || c->mask_evict == 1, "config: 'mask_evict' must be 0 or 1 (got %lld)",
             (long long)c->mask_evict);
    KV_CHECK(c->mask_restride >= 0, "config: 'mask_restride' must be >= 0 (0: off; got %lld)",
             (long long)c->mask_restride);
    KV_CHECK(c->mask || (c->mask_evict == 0 && c->mask_restride == 0),
             "config: 'mask_evict' and 'mask_restride' shape the RefreshKV mask: they need mask=1");
    KV_CHECK(c->mask == 0 || c->mask == 1, "config: 'mask' must be 0 or 1 (got %lld)", (long long)c->mask);
    KV_CHECK(c->micro_batch >= 1 && c->global_batch >= 1, "config: 'global_batch' and 'micro_batch' must be >= 1");
    /* checked: under mpirun a large micro_batch times the ranks wraps, and
     * the remainder below would divide by zero or by a wrong product */
    int64_t per_round;
    KV_CHECK(!__builtin_mul_overflow(c->micro_batch, (int64_t)world, &per_round),
             "config: 'micro_batch' (%lld) x ranks (%d) overflows 64 bits", (long long)c->micro_batch, world);
    KV_CHECK(c->global_batch % per_round == 0,
             "config: 'global_batch' (%lld) must be divisible by 'micro_batch' (%lld) x ranks (%d)",
             (long long)c->global_batch, (long long)c->micro_batch, world);
    KV_CHECK(c->steps >= 0 && c->epochs >= 1, "config: 'steps' must be >= 0 and 'epochs' >= 1");
    KV_CHECK(c->warmup_steps >= 0, "config: 'warmup_steps' must be >= 0 (got %lld)", (long long)c->warmup_steps);
    /* a run finds a bad interval or count only at its end, and --resume
     * would then repeat the whole run: refused here, before any work */
    KV_CHECK(c->log_interval >= 1, "config: 'log_interval' must be >= 1 (got %lld)", (long long)c->log_interval);
    KV_CHECK(c->eval_interval >= 0 && c->ckpt_interval >= 0,
             "config: 'eval_interval' and 'ckpt_interval' must be >= 0 (0: only at the end; got %lld and %lld)",
             (long long)c->eval_interval, (long long)c->ckpt_interval);
    KV_CHECK(c->eval_batches >= 0 && c->eval_batches <= EVAL_BATCHES_MAX,
             "config: 'eval_batches' must be in [0, %lld] (0: no dev evaluation; got %lld)",
             (long long)EVAL_BATCHES_MAX, (long long)c->eval_batches);
    KV_CHECK(c->lr > 0 && c->min_lr_frac >= 0 && c->min_lr_frac <= 1,
             "config: 'lr' must be > 0, 'min_lr_frac' in [0,1]");
    KV_CHECK(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1 && c->eps > 0,
             "config: 'beta1', 'beta2' must be in [0,1) and 'eps' > 0");
    KV_CHECK(c->keep_last >= 1, "config: 'keep_last' must be >= 1");
    KV_CHECK(isfinite(c->comm_timeout) && c->comm_timeout >= 0 && c->comm_timeout <= 1e7,
             "config: 'comm_timeout' must be a number of seconds in [0, 1e7] (got %g)", c->comm_timeout);
    KV_CHECK(isfinite(c->grad_clip) && c->grad_clip >= 0, "config: 'grad_clip' must be a finite number >= 0 (got %g)",
             c->grad_clip);
    KV_CHECK(isfinite(c->lr) && isfinite(c->weight_decay) && c->weight_decay >= 0,
             "config: 'lr' and 'weight_decay' must be finite, 'weight_decay' >= 0");
    decoder_recompute_check((DecoderRecompute)c->recompute, "config 'recompute'");
    KV_CHECK(one_of(c->precision, "fp32", "bf16", "bf16sr"),
             "config: 'precision' must be fp32, bf16 or bf16sr (got '%s')", c->precision);
    KV_CHECK(c->share_device == 0 || c->share_device == 1, "config: 'share_device' must be 0 or 1 (got %lld)",
             (long long)c->share_device);
    KV_CHECK(c->optim_device == 0 || c->optim_device == 1, "config: 'optim_device' must be 0 or 1 (got %lld)",
             (long long)c->optim_device);
    KV_CHECK(c->reshard_after_forward == 0 || c->reshard_after_forward == 1,
             "config: 'reshard_after_forward' must be 0 or 1 (got %lld)", (long long)c->reshard_after_forward);
    /* combinations of device, precision, optimizer placement and ranks: train_mode_resolve */
    char names[256];
    KV_CHECK(backend_known(c->device), "config: 'device' must be auto, %s (got '%s')",
             backend_names(names, sizeof names), c->device);
}

char *train_config_to_json(const TrainConfig *c) {
    json_t *o = json_object();
    for (int i = 0; i < N_KEYS; i++) {
        const char *p = (const char *)c + keys[i].offset;
        json_t *v = keys[i].type == K_STR    ? json_string(p)
                    : keys[i].type == K_INT  ? json_integer(*(const int64_t *)p)
                    : keys[i].type == K_ENUM ? json_string(keys[i].name(*(const int64_t *)p))
                                             : json_real(*(const double *)p);
        /* jansson returns NULL for a string that is not UTF-8 or a non-finite
         * number, and set_new would then drop the key without a word;
         * train_config_validate refuses both, so this is a broken invariant */
        KV_CHECK(v != NULL && json_object_set_new(o, keys[i].key, v) == 0,
                 "config: '%s' cannot be written to the run's train_config.json", keys[i].key);
    }
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    KV_CHECK(s != NULL, "config: cannot serialise the run's train_config.json");
    json_decref(o);
    return s;
}

void train_config_print_keys(void) {
    printf("\nconfig keys (JSON object in --config, or --set key=value):\n");
    for (int i = 0; i < N_KEYS; i++) printf("  %-14s %-10s %s\n", keys[i].key, keys[i].dflt, keys[i].help);
}
