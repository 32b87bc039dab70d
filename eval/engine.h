#ifndef KVCPT_ENGINE_H
#define KVCPT_ENGINE_H
/* The KV-cache decode engine behind `kvcpt eval`: a full causal prefill of
 * positions 0..L-1 (shared by every policy), then teacher-forced decode
 * steps that each attend only to the keys the policy keeps.
 *
 * One DecodeEngine holds one document's caches and prefill statistics.
 * engine_decode_batch steps several documents (same L, one policy instance
 * each) in lockstep: their token-wise projections become one (N, C) x (C, OC)
 * product, their attention and policy work run side by side, and each
 * document's NLLs are bit-identical to decoding it alone (docs/eval.md).
 *
 * Backends share this interface and the decode step's op order through
 * their tables (eval/engine_backend.h): the CPU (engine_create) and a
 * device's (eval/decode_device.h: the GPU's keeps caches, weights and
 * activations in device memory), where the policies still run on the host
 * from the same prefill statistics. */
#include <stdint.h>

#include "../model/decoder.h"
#include "policy.h"

struct DecodeBackend;

/* Called by engine_decode_batch after decode step `step` of `steps` (1..S-1), e.g. for progress. */
typedef void (*EngineStepHook)(void *ctx, int64_t step, int64_t steps);

typedef struct {
    Decoder *m;                         /* the host model (policies read o_proj from it) */
    const ModelTensors *w;            /* the weights decode steps read: host, or device (GPU) */
    int64_t cap, L, W;
    float **kc, **vc;                 /* per layer (cap, Hkv, D): host, or device (GPU) */
    float **colsum, **last_probs, **last_out, **q_last; /* per layer prefill statistics (host) */
    float *rope_cos, *rope_sin;       /* (cap, D/2), host */
    float *probs;                     /* (Hq, cap) attention of the current step (host) */
    int32_t **keys;                   /* per KV head: views of key_buf, cap entries each */
    int32_t *key_buf;
    int64_t *off, *n;                 /* the step's packed key lists (kernels/attention_decode.h) */
    int64_t kv_reads;                 /* cached (position, KV head) entries read, summed over layers */
    /* wall seconds of this row's own decode work on the CPU (key choice,
     * attention over the kept keys, the policy's update), summed over steps */
    double own_s;
    /* this row's share of engine_decode_batch's wall time (see there), summed over calls */
    double decode_s;
    float *prefill_logits;            /* (V) logits of position L-1 (host) */
    int32_t *first_keys;              /* NULL, or (layers, Hkv, L): the keys of the first decode step (position L) */
    int64_t *first_n;                 /* (layers, Hkv) their counts (engine_record_first_step) */
    const struct DecodeBackend *backend; /* the CPU's (engine_create) or a device's, which creates the engine */
    void *device;                     /* the device backend's own state for this engine; NULL on the CPU */
    /* engine_fork: the rows L..cap-1 of the caches, per layer ((cap - L), Hkv, D);
     * kc/vc are then the parent's and only their rows < L are read. NULL otherwise. */
    float **kt, **vt;
    int forked;
    /* engine_decode_batch calls the first document's hook (may be NULL) after each step */
    EngineStepHook on_step;
    void *step_ctx;
} DecodeEngine;

/* cap: the most positions a document will use (L + S). W: prefill rows kept for policies. */
void engine_create(DecodeEngine *e, Decoder *m, int64_t cap, int64_t W);
void engine_free(DecodeEngine *e);
/* From now on every decode records the cached keys its policy chose at the
 * first step (position L, the set kept after the prefill; the current
 * position excluded) in first_keys / first_n, ascending: what `eval --dump`
 * writes to compare the kept sets with another implementation. */
void engine_record_first_step(DecodeEngine *e);
/* A CPU engine that decodes one more policy on e's prefill, so that every
 * policy variant of a document runs in one engine_decode_batch (one row
 * each: the step's projections read each weight once for all of them). It
 * reads e's prefill caches (rows < L), statistics, RoPE tables and prefill
 * logits without writing them, and owns its cache rows L..cap-1, key lists
 * and probabilities, so its results are those of decoding e itself. e must
 * stay prefilled and alive until engine_fork_free(f); f records its first
 * step when e does (engine_record_first_step). */
void engine_fork(DecodeEngine *f, const DecodeEngine *e);
void engine_fork_free(DecodeEngine *f);
/* Full causal prefill of tokens[0..L-1] (mask off); keeps caches and statistics. */
void engine_prefill(DecodeEngine *e, const int32_t *tokens, int64_t L);
/* Runs policy p over decode positions L..L+S-2 with teacher forcing and
 * writes the S negative log-likelihoods of tokens[L..L+S-1] (the first from
 * the prefill's last position, identical for every policy). */
void engine_decode(DecodeEngine *e, Policy *p, const int32_t *tokens, int64_t S, double *nll);
/* engine_decode for nb documents at once: document b (prefilled in e[b],
 * every e[b] with the same model, backend and L) runs its own policy p[b]
 * over tokens[b]; its S NLLs go to nll + b*S. The call's wall time is added
 * to the rows' decode_s: the part outside attention (projections, norms,
 * logits: the same work for every row) in equal shares, the attention part
 * in proportion to each row's own_s, so a row's decode_s is what its policy
 * cost and the shares sum to the wall time (equal shares where no row
 * measured own_s, as on the GPU, whose rows of one call are one policy). */
void engine_decode_batch(DecodeEngine *const *e, Policy *const *p, const int32_t *const *tokens, int64_t nb, int64_t S,
                         double *nll);
/* engine_decode_batch that also writes top1 + b*S: 1 where the target is
 * the most likely token (argmax_of), 0 elsewhere; top1 may be NULL. */
void engine_decode_batch_top1(DecodeEngine *const *e, Policy *const *p, const int32_t *const *tokens, int64_t nb,
                              int64_t S, double *nll, uint8_t *top1);
/* Bytes of cached keys and values the engine's decode steps read so far:
 * kv_reads entries of D floats, keys and values. */
double engine_kv_bytes(const DecodeEngine *e);
/* -log softmax(logits)[target] in double. */
double nll_of(const float *logits, int64_t V, int32_t target);
/* The index of the largest logit, the lowest one among equals (as
 * torch.argmax). */
int64_t argmax_of(const float *logits, int64_t V);
#endif
