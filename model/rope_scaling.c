/* RoPE scaling, the part of the config that config.h declares below the
 * config itself. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/util.h"

static const char *const type_names[] = {"default", "linear", "dynamic", "yarn", "llama3"};
#define N_TYPES ((int)(sizeof type_names / sizeof type_names[0]))

/* The fields each type reads besides rope_type (or the older "type"),
 * rope_theta and partial_rotary_factor, as transformers' _compute_*_parameters
 * read them. */
static const char *const type_fields[][9] = {
    [ROPE_DEFAULT] = {NULL},
    [ROPE_LINEAR] = {"factor", NULL},
    [ROPE_DYNAMIC] = {"factor", NULL},
    [ROPE_YARN] = {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
                   "mscale_all_dim", "truncate", NULL},
    [ROPE_LLAMA3] = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings", NULL},
};

static int reads_field(RopeType t, const char *key) {
    if (!strcmp(key, "rope_type") || !strcmp(key, "type") || !strcmp(key, "rope_theta") ||
        !strcmp(key, "partial_rotary_factor"))
        return 1;
    for (int i = 0; type_fields[t][i]; i++)
        if (!strcmp(type_fields[t][i], key)) return 1;
    return 0;
}

/* One block as it stands in the file. */
typedef struct {
    int present;  /* the field is there and not null */
    double theta; /* 0: the block does not carry it */
    int has_original;
    int factor_null; /* yarn's "factor": null */
    RopeScaling s;
} RopeBlock;

/* A number, or 0 when absent or null (transformers reads both as "not given"). */
static double opt_num(json_t *rs, const char *field, const char *key, const char *origin) {
    json_t *v = json_object_get(rs, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) die("%s: config field '%s.%s' must be a number", origin, field, key);
    return json_number_value(v);
}

static RopeType parse_type(json_t *rs, const char *field, const char *origin) {
    json_t *t = json_object_get(rs, "rope_type");
    if (!t) t = json_object_get(rs, "type");
    if (!t || !json_is_string(t))
        die("%s: config field '%s.rope_type' is missing (kvcpt reads one RoPE block for all layers)", origin, field);
    const char *name = json_string_value(t);
    for (int i = 0; i < N_TYPES; i++)
        if (!strcmp(name, type_names[i])) return (RopeType)i;
    die("%s: config field '%s.rope_type' is '%s'; kvcpt supports default, linear, dynamic, yarn and llama3", origin,
        field, name);
}

static RopeBlock parse_block(json_t *rs, const char *field, const DecoderConfig *c, const char *origin) {
    RopeBlock b = {0};
    if (!rs || json_is_null(rs)) return b;
    b.present = 1;
    if (!json_is_object(rs)) die("%s: config field '%s' must be an object or null", origin, field);
    RopeScaling *s = &b.s;
    s->type = parse_type(rs, field, origin);
    const char *key;
    json_t *v;
    json_object_foreach(rs, key, v) {
        if (reads_field(s->type, key)) continue;
        char list[256];
        size_t at = 0;
        for (int i = 0; type_fields[s->type][i] && at < sizeof list; i++)
            at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", i ? ", " : "", type_fields[s->type][i]);
        die("%s: config field '%s.%s' is not one kvcpt honours for rope_type '%s' (it reads %s%s)", origin, field, key,
            type_names[s->type], at ? "" : "no other field", at ? list : "");
    }
    json_t *th = json_object_get(rs, "rope_theta");
    if (th) {
        if (!json_is_number(th)) die("%s: config field '%s.rope_theta' must be a number", origin, field);
        b.theta = json_number_value(th);
        KV_CHECK(b.theta > 0, "%s: config field '%s.rope_theta' must be > 0", origin, field);
    }
    json_t *prf = json_object_get(rs, "partial_rotary_factor");
    KV_CHECK(!prf || json_is_null(prf) || (json_is_number(prf) && json_number_value(prf) == 1.0),
             "%s: config field '%s.partial_rotary_factor' must be 1 (kvcpt rotates whole heads)", origin, field);
    if (s->type == ROPE_DEFAULT) return b;
    json_t *f = json_object_get(rs, "factor");
    if (!f) die("%s: config field '%s.factor' is missing (rope_type '%s')", origin, field, type_names[s->type]);
    s->factor = opt_num(rs, field, "factor", origin);
    b.factor_null = json_is_null(f);
    if (s->type == ROPE_LLAMA3 || s->type == ROPE_YARN) {
        /* absent: max_position_embeddings, as transformers' standardize_rope_params fills it in */
        json_t *o = json_object_get(rs, "original_max_position_embeddings");
        b.has_original = o != NULL;
        s->original_max_pos = c->max_position_embeddings;
        if (o) {
            KV_CHECK(json_is_integer(o) ||
                         (json_is_real(o) && json_real_value(o) == (double)(int64_t)json_real_value(o)),
                     "%s: config field '%s.original_max_position_embeddings' must be an integer", origin, field);
            s->original_max_pos = (int64_t)json_number_value(o);
        }
    }
    if (s->type == ROPE_LLAMA3) {
        const char *need[] = {"low_freq_factor", "high_freq_factor"};
        for (int i = 0; i < 2; i++)
            KV_CHECK(json_object_get(rs, need[i]), "%s: config field '%s.%s' is missing (rope_type 'llama3')", origin,
                     field, need[i]);
        s->low_freq_factor = opt_num(rs, field, "low_freq_factor", origin);
        s->high_freq_factor = opt_num(rs, field, "high_freq_factor", origin);
    }
    if (s->type == ROPE_YARN) {
        s->attention_factor = opt_num(rs, field, "attention_factor", origin);
        s->beta_fast = opt_num(rs, field, "beta_fast", origin);
        s->beta_slow = opt_num(rs, field, "beta_slow", origin);
        s->mscale = opt_num(rs, field, "mscale", origin);
        s->mscale_all_dim = opt_num(rs, field, "mscale_all_dim", origin);
        json_t *tr = json_object_get(rs, "truncate");
        KV_CHECK(!tr || json_is_boolean(tr), "%s: config field '%s.truncate' must be true or false", origin, field);
        s->no_truncate = tr && json_is_false(tr);
    } else { /* only yarn's factor may be null */
        KV_CHECK(!json_is_null(f), "%s: config field '%s.factor' must be a number", origin, field);
    }
    return b;
}

static int scalings_equal(const RopeScaling *a, const RopeScaling *b) {
    return a->type == b->type && a->factor == b->factor && a->low_freq_factor == b->low_freq_factor &&
           a->high_freq_factor == b->high_freq_factor && a->original_max_pos == b->original_max_pos &&
           a->attention_factor == b->attention_factor && a->beta_fast == b->beta_fast && a->beta_slow == b->beta_slow &&
           a->mscale == b->mscale && a->mscale_all_dim == b->mscale_all_dim && a->no_truncate == b->no_truncate;
}

/* yarn's factor may be null: then transformers takes
 * max_position_embeddings / original_max_position_embeddings */
static void resolve(RopeBlock *b, const DecoderConfig *c) {
    if (b->s.type == ROPE_YARN && b->factor_null && b->s.original_max_pos > 0)
        b->s.factor = (double)c->max_position_embeddings / (double)b->s.original_max_pos;
}

/* A file carrying both layouts (a config written by one transformers
 * version and edited by hand for another) must say the same in both places:
 * silently taking one would train with the wrong positions. */
void rope_scaling_parse(DecoderConfig *c, json_t *root, const char *origin) {
    RopeBlock v4 = parse_block(json_object_get(root, "rope_scaling"), "rope_scaling", c, origin);
    RopeBlock v5 = parse_block(json_object_get(root, "rope_parameters"), "rope_parameters", c, origin);
    json_t *top_theta = json_object_get(root, "rope_theta");
    int has_top = top_theta && !json_is_null(top_theta);
    if (has_top && !json_is_number(top_theta)) die("%s: config field 'rope_theta' must be a number", origin);
    c->rope_theta = has_top ? json_number_value(top_theta) : 10000.0;
    /* theta inside a block (transformers 5's layout) is the one used: it
     * must agree with the top-level one and with the other block's */
    RopeBlock *blocks[] = {&v4, &v5};
    const char *names[] = {"rope_scaling", "rope_parameters"};
    for (int i = 0; i < 2; i++) {
        if (!blocks[i]->present || blocks[i]->theta == 0) continue;
        KV_CHECK(!has_top || json_number_value(top_theta) == blocks[i]->theta,
                 "%s: config fields 'rope_theta' (%g) and '%s.rope_theta' (%g) disagree", origin,
                 json_number_value(top_theta), names[i], blocks[i]->theta);
        KV_CHECK(i == 0 || v4.theta == 0 || v4.theta == v5.theta,
                 "%s: config fields 'rope_scaling.rope_theta' (%g) and 'rope_parameters.rope_theta' (%g) disagree",
                 origin, v4.theta, v5.theta);
        c->rope_theta = blocks[i]->theta;
    }
    /* a top-level original_max_position_embeddings (Phi-3's layout) is the one
     * transformers uses for the types that read it */
    json_t *top = json_object_get(root, "original_max_position_embeddings");
    int has_top_original = top && !json_is_null(top);
    KV_CHECK(!has_top_original || json_is_integer(top),
             "%s: config field 'original_max_position_embeddings' must be an integer", origin);
    for (int i = 0; i < 2; i++) {
        RopeBlock *b = blocks[i];
        if (has_top_original && (b->s.type == ROPE_YARN || b->s.type == ROPE_LLAMA3)) {
            int64_t o = (int64_t)json_integer_value(top);
            KV_CHECK(!b->has_original || b->s.original_max_pos == o,
                     "%s: config fields 'original_max_position_embeddings' (%lld) and "
                     "'%s.original_max_position_embeddings' (%lld) disagree",
                     origin, (long long)o, names[i], (long long)b->s.original_max_pos);
            b->s.original_max_pos = o;
        }
        resolve(b, c);
    }
    KV_CHECK(!v4.present || !v5.present || scalings_equal(&v4.s, &v5.s),
             "%s: config fields 'rope_scaling' and 'rope_parameters' describe different RoPE scalings", origin);
    c->rope_scaling = v5.present ? v5.s : v4.s;
}

void rope_scaling_validate(const DecoderConfig *c, const char *origin) {
    const RopeScaling *s = &c->rope_scaling;
    KV_CHECK(c->rope_theta > 0, "%s: config field 'rope_theta' must be > 0", origin);
    KV_CHECK((int)s->type >= 0 && (int)s->type < N_TYPES, "%s: unknown RoPE scaling type %d", origin, (int)s->type);
    if (s->type == ROPE_DEFAULT) return;
    KV_CHECK(s->factor > 0 && isfinite(s->factor), "%s: config field 'rope_scaling.factor' must be > 0 (got %g)",
             origin, s->factor);
    if (s->type == ROPE_LLAMA3 || s->type == ROPE_YARN)
        KV_CHECK(s->original_max_pos > 0,
                 "%s: config field 'rope_scaling.original_max_position_embeddings' must "
                 "be > 0 (got %lld)",
                 origin, (long long)s->original_max_pos);
    if (s->type == ROPE_LLAMA3)
        KV_CHECK(s->low_freq_factor > 0 && s->high_freq_factor > s->low_freq_factor,
                 "%s: config fields 'rope_scaling.high_freq_factor' (%g) must exceed 'low_freq_factor' (%g) > 0",
                 origin, s->high_freq_factor, s->low_freq_factor);
    /* the grown base's exponent is D / (D - 2) */
    if (s->type == ROPE_DYNAMIC)
        KV_CHECK(c->head_dim > 2, "%s: rope_type 'dynamic' needs 'head_dim' > 2 (got %lld)", origin,
                 (long long)c->head_dim);
    if (s->type == ROPE_YARN) {
        /* the ramp's bounds take logarithms of the base and of the rotation counts */
        KV_CHECK(c->rope_theta > 1, "%s: rope_type 'yarn' needs 'rope_theta' > 1 (got %g)", origin, c->rope_theta);
        const struct {
            const char *key;
            double v;
        } nonneg[] = {{"attention_factor", s->attention_factor},
                      {"beta_fast", s->beta_fast},
                      {"beta_slow", s->beta_slow},
                      {"mscale", s->mscale},
                      {"mscale_all_dim", s->mscale_all_dim}};
        for (size_t i = 0; i < sizeof nonneg / sizeof nonneg[0]; i++)
            KV_CHECK(nonneg[i].v >= 0 && isfinite(nonneg[i].v),
                     "%s: config field 'rope_scaling.%s' must be a finite number > 0 (got %g)", origin, nonneg[i].key,
                     nonneg[i].v);
    }
}

static void set_new(json_t *o, const char *key, json_t *v) {
    KV_CHECK(v != NULL && json_object_set_new(o, key, v) == 0, "config: cannot store field 'rope_scaling.%s'", key);
}

json_t *rope_scaling_json(const DecoderConfig *c) {
    const RopeScaling *s = &c->rope_scaling;
    if (s->type == ROPE_DEFAULT) return json_null();
    json_t *o = json_object();
    KV_CHECK(o != NULL, "config: out of memory");
    set_new(o, "rope_type", json_string(type_names[s->type]));
    set_new(o, "factor", json_real(s->factor));
    if (s->type == ROPE_LLAMA3) {
        set_new(o, "low_freq_factor", json_real(s->low_freq_factor));
        set_new(o, "high_freq_factor", json_real(s->high_freq_factor));
    }
    if (s->type == ROPE_LLAMA3 || s->type == ROPE_YARN)
        set_new(o, "original_max_position_embeddings", json_integer((json_int_t)s->original_max_pos));
    if (s->type == ROPE_YARN) {
        /* the optional fields as given: absent ones keep transformers' defaults */
        const struct {
            const char *key;
            double v;
        } opt[] = {{"attention_factor", s->attention_factor},
                   {"beta_fast", s->beta_fast},
                   {"beta_slow", s->beta_slow},
                   {"mscale", s->mscale},
                   {"mscale_all_dim", s->mscale_all_dim}};
        for (size_t i = 0; i < sizeof opt / sizeof opt[0]; i++)
            if (opt[i].v != 0) set_new(o, opt[i].key, json_real(opt[i].v));
        if (s->no_truncate) set_new(o, "truncate", json_false());
    }
    return o;
}

void rope_scaling_override(DecoderConfig *c, const char *spec, const char *option) {
    json_t *block = NULL;
    if (spec[0] == '{') {
        json_error_t err;
        block = json_loads(spec, 0, &err);
        KV_CHECK(block, "%s '%s': invalid JSON at column %d: %s", option, spec, err.column, err.text);
    } else if (!strcmp(spec, "none") || !strcmp(spec, "default")) {
        block = json_null();
    } else {
        /* TYPE:FACTOR, read as the block {"rope_type": TYPE, "factor": FACTOR} */
        const char *colon = strchr(spec, ':');
        char *end = NULL;
        double factor = colon ? strtod(colon + 1, &end) : 0;
        KV_CHECK(colon && end != colon + 1 && *end == '\0',
                 "%s '%s': expected TYPE:FACTOR (linear:2, dynamic:2, yarn:2), none, or a JSON rope_scaling "
                 "object",
                 option, spec);
        char type[32];
        KV_CHECK((size_t)(colon - spec) < sizeof type, "%s '%s': unknown RoPE type", option, spec);
        memcpy(type, spec, (size_t)(colon - spec));
        type[colon - spec] = '\0';
        KV_CHECK(!strcmp(type, "linear") || !strcmp(type, "dynamic") || !strcmp(type, "yarn"),
                 "%s '%s': TYPE:FACTOR takes linear, dynamic or yarn (llama3 needs its other fields: give a JSON "
                 "object)",
                 option, spec);
        block = json_pack("{s:s,s:f}", "rope_type", type, "factor", factor);
        KV_CHECK(block, "%s: out of memory", option);
    }
    RopeBlock b = parse_block(block, "rope_scaling", c, option);
    json_decref(block);
    KV_CHECK(b.theta == 0 || b.theta == c->rope_theta,
             "%s: its 'rope_theta' (%g) differs from the model's (%g): "
             "give only the scaling",
             option, b.theta, c->rope_theta);
    resolve(&b, c);
    c->rope_scaling = b.s;
    rope_scaling_validate(c, option);
}

void rope_scaling_label(char *out, size_t n, const RopeScaling *s) {
    if (s->type == ROPE_DEFAULT) snprintf(out, n, "none");
    else snprintf(out, n, "%s factor %g", type_names[s->type], s->factor);
}

int64_t rope_trained_context(const DecoderConfig *c) {
    const RopeScaling *s = &c->rope_scaling;
    return s->type == ROPE_YARN || s->type == ROPE_LLAMA3 ? s->original_max_pos : c->max_position_embeddings;
}

int64_t rope_covered_context(const DecoderConfig *c) {
    int64_t trained = rope_trained_context(c);
    if (c->rope_scaling.type == ROPE_DEFAULT) return trained;
    double ext = floor((double)trained * c->rope_scaling.factor);
    int64_t covered = ext >= 9.2e18 ? INT64_MAX : (int64_t)ext;
    return covered > c->max_position_embeddings ? covered : c->max_position_embeddings;
}

RopeParams rope_params(const DecoderConfig *c, int64_t seq_len) {
    return (RopeParams){c->rope_theta, c->rope_scaling, c->max_position_embeddings, seq_len};
}

int rope_tables_depend_on_length(const DecoderConfig *c) { return c->rope_scaling.type == ROPE_DYNAMIC; }
