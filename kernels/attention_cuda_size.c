#include "attention_cuda_size.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../common/checked.h"
#include "../common/util.h"

int64_t attention_row_mask_words(int64_t T) { return (T + 63) / 64; }

/* Listed rows: one bitmap of the keys each row p >= L sees (B, Hkv, T - L, words). */
static int64_t row_mask_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hkv) {
    if (!refresh_active(m, T) || !refresh_per_row(m)) return 0;
    return (int64_t)sizeof(uint64_t) * B * Hkv * (T - m->L) * attention_row_mask_words(T);
}

int64_t attention_select_chunks(int64_t n) { return (n + ATTN_SELECT_CHUNK_KEYS - 1) / ATTN_SELECT_CHUNK_KEYS; }

int64_t attention_cuda_select_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv) {
    if (!refresh_active(m, T)) return 0;
    int64_t nh = refresh_selection_heads(m, Hq, Hkv), BG = B * Hkv;
    /* scores (nh per key), the aggregate and the pooled bits over n keys,
     * and each head's (max, sum) per key chunk; per-row selection: n up to
     * T (a full row's), and a byte per key marking the epoch's selection */
    if (refresh_per_row(m))
        return (int64_t)sizeof(float) * BG * (nh * T + 2 * T + 2 * nh * attention_select_chunks(T)) + BG * T;
    if (refresh_num_selected(m) == m->L) return 0; /* every prefill key: no scores */
    return (int64_t)sizeof(float) * BG * (nh * m->L + 2 * m->L + 2 * nh * attention_select_chunks(m->L));
}

int64_t attention_cuda_row_mask_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hkv) {
    return row_mask_bytes(m, B, T, Hkv);
}

int64_t attention_mma_bwd_groups(int64_t B, int64_t T, int64_t Hq) {
    /* kernels/attention_mma_bwd_one_pass.cuh: 128-key tiles */
    const int64_t slots = 132, cap = 8, heads = B * Hq > 0 ? B * Hq : 1, key_tiles = (T + 127) / 128;
    int64_t g = slots / heads;
    if (g > cap) g = cap;
    if (g > key_tiles) g = key_tiles;
    return g > 1 ? g : 1;
}

AttnBwdVariant attention_bwd_variant_default(void) {
    const char *env = getenv(ATTN_BWD_ENV);
    if (!env || !*env || strcmp(env, "one_pass") == 0) return ATTN_BWD_ONE_PASS;
    if (strcmp(env, "two_pass") == 0) return ATTN_BWD_TWO_PASS;
    die("%s: the attention backward must be one_pass or two_pass (got '%s')", ATTN_BWD_ENV, env);
}

const char *attention_bwd_variant_name(AttnBwdVariant v) { return v == ATTN_BWD_ONE_PASS ? "one_pass" : "two_pass"; }

int64_t attention_cuda_backward_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                              int64_t D, AttnBwdVariant v) {
    /* the row sums (B, Hq, T); the one pass adds its partial dQ (G copies,
     * the first of them dq itself) and per-query-head dK, dV (B, T, Hq, D)
     * each */
    const int64_t copies = v == ATTN_BWD_ONE_PASS ? (attention_mma_bwd_groups(B, T, Hq) + 1) * D : 0;
    int64_t sums = (int64_t)sizeof(float) * B * Hq * T * (1 + copies);
    if (!refresh_active(m, T)) return sums;
    if (refresh_per_row(m)) return sums + row_mask_bytes(m, B, T, Hkv);
    return sums + B * Hkv * m->L; /* one byte per prefill key: selected or not */
}

/* Blocks that fill one wave of the suffix forward on an H100: 132 SMs, one
 * block each (the row-tile kernel's 115 KiB of shared memory at D = 128
 * leaves no room for a second). A constant, not the device's SM count, so
 * that the chunks, and with them the bits, are the same on every GPU. */
#define SUFFIX_WAVE_BLOCKS 132

/* Entries of the longest suffix key list: the last row's, sel ++ (L..T-1),
 * or every key 0..T-1 through the bitmaps with per-row records. */
static int64_t suffix_list_len(const RefreshMask *m, int64_t T) {
    return refresh_per_row(m) ? T : refresh_num_selected(m) + (T - m->L);
}

int64_t attention_suffix_chunk_keys(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq) {
    if (!refresh_active(m, T)) return 0;
    const int64_t n = suffix_list_len(m, T), row_tiles = (T - m->L + 63) / 64;
    int64_t heads, blocks;
    if (i64_mul(B, Hq, &heads) != 0 || i64_mul(row_tiles, heads, &blocks) != 0 || blocks >= SUFFIX_WAVE_BLOCKS / 2)
        return (n + 63) / 64 * 64; /* enough blocks already: one chunk, the unsplit kernel */
    const int64_t split = SUFFIX_WAVE_BLOCKS / blocks;
    return ((n + split - 1) / split + 63) / 64 * 64;
}

int64_t attention_suffix_chunks(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq) {
    const int64_t keys = attention_suffix_chunk_keys(m, B, T, Hq);
    return keys == 0 ? 0 : (suffix_list_len(m, T) + keys - 1) / keys;
}

int64_t attention_suffix_partial_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t D) {
    const int64_t chunks = attention_suffix_chunks(m, B, T, Hq);
    if (chunks < 2) return 0;
    int64_t bytes = (int64_t)sizeof(float) * (D + 2);
    KV_CHECK(i64_mul(bytes, chunks, &bytes) == 0 && i64_mul(bytes, T - m->L, &bytes) == 0 &&
                 i64_mul(bytes, B, &bytes) == 0 && i64_mul(bytes, Hq, &bytes) == 0,
             "attention: suffix partials of B=%lld T=%lld Hq=%lld D=%lld overflow int64", (long long)B, (long long)T,
             (long long)Hq, (long long)D);
    return bytes;
}

int64_t attention_cuda_forward_scratch_bytes(const RefreshMask *m, int64_t B, int64_t T, int64_t Hq, int64_t Hkv,
                                             int64_t D) {
    return row_mask_bytes(m, B, T, Hkv) + attention_suffix_partial_bytes(m, B, T, Hq, D);
}
