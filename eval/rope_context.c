#include "rope_context.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../checkpoints/model_source.h"
#include "../common/util.h"

void eval_model_config(DecoderConfig *c, const char *model, const char *rope_spec) {
    model_source_config(c, model, "eval: --model");
    if (rope_spec) rope_scaling_override(c, rope_spec, "eval --rope-scaling");
}

void rope_context_describe(RopeContext *rc, const DecoderConfig *c, int64_t tokens, int from_option) {
    memset(rc, 0, sizeof *rc);
    rope_scaling_label(rc->scaling, sizeof rc->scaling, &c->rope_scaling);
    json_t *j = rope_scaling_json(c);
    char *text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    json_decref(j);
    KV_CHECK(text && strlen(text) < sizeof rc->scaling_json, "eval: the rope_scaling block does not fit %zu bytes",
             sizeof rc->scaling_json);
    snprintf(rc->scaling_json, sizeof rc->scaling_json, "%s", text);
    free(text);
    rc->from_option = from_option;
    rc->tokens = tokens;
    rc->trained = rope_trained_context(c);
    rc->covered = rope_covered_context(c);
    rc->beyond = tokens > rc->covered;
    rc->extended = !rc->beyond && tokens > rc->trained;
}

void eval_check_rope_contexts(const DecoderConfig *c, const char *model, int from_option, const int64_t *ctx, int n_ctx,
                              int64_t S, int allow_beyond) {
    for (int i = 0; i < n_ctx && !allow_beyond; i++) {
        RopeContext rc;
        rope_context_describe(&rc, c, ctx[i] + S, from_option);
        if (!rc.beyond) continue;
        if (c->rope_scaling.type == ROPE_DEFAULT)
            die("eval: --L %lld: L + S = %lld tokens are beyond the %lld model '%s' was trained to "
                "(max_position_embeddings) and its config has no RoPE scaling: give --rope-scaling (e.g. yarn:%g, "
                "the extension transformers computes from the same rope_scaling field), or --allow-beyond-context to "
                "run it labelled as beyond",
                (long long)ctx[i], (long long)rc.tokens, (long long)rc.trained, model,
                ceil(100.0 * (double)rc.tokens / (double)rc.trained) / 100);
        die("eval: --L %lld: L + S = %lld tokens are beyond the %lld model '%s' covers (trained to %lld; RoPE "
            "scaling %s%s): give a larger --rope-scaling factor, or --allow-beyond-context to run it labelled as "
            "beyond",
            (long long)ctx[i], (long long)rc.tokens, (long long)rc.covered, model, (long long)rc.trained, rc.scaling,
            from_option ? " from --rope-scaling" : " from its config");
    }
}

/* "yarn factor 2" -> "yarn x2" */
static void short_scaling(char *out, size_t n, const char *label) {
    const char *f = strstr(label, " factor ");
    if (f) snprintf(out, n, "%.*s x%s", (int)(f - label), label, f + strlen(" factor "));
    else snprintf(out, n, "%s", label);
}

void rope_context_tag(char *out, size_t n, const RopeContext *rc) {
    if (rc->beyond) snprintf(out, n, "BEYOND");
    else if (rc->extended || rc->from_option) short_scaling(out, n, rc->scaling);
    else snprintf(out, n, "%s", "");
}

void rope_context_print_note(const RopeContext *rc, int64_t L, const char *model) {
    const char *from = rc->from_option ? "--rope-scaling" : "its config.json";
    if (rc->beyond)
        printf("L = %lld (%s): BEYOND what the model's RoPE covers: L + S = %lld tokens > %lld (trained to %lld, "
               "RoPE scaling %s); run with --allow-beyond-context, not a headline result\n",
               (long long)L, model, (long long)rc->tokens, (long long)rc->covered, (long long)rc->trained,
               strcmp(rc->scaling, "none") ? rc->scaling : "none, no extension");
    else if (rc->extended || rc->from_option)
        printf("L = %lld (%s): RoPE scaling %s from %s (transformers computes the same from rope_scaling %s): "
               "L + S = %lld tokens, trained to %lld, covered to %lld\n",
               (long long)L, model, rc->scaling, from, rc->scaling_json, (long long)rc->tokens, (long long)rc->trained,
               (long long)rc->covered);
}
