#include "refresh_mask.h"

#include <stdint.h>

#include "../common/util.h"

int64_t refresh_num_selected(const RefreshMask *m) { return m->K < m->L ? m->K : m->L; }

int refresh_active(const RefreshMask *m, int64_t T) { return m->enabled && T > m->L; }

int64_t refresh_selection_heads(const RefreshMask *m, int64_t Hq, int64_t Hkv) {
    return select_group_heads(m->agg, Hq / Hkv);
}

int refresh_per_row(const RefreshMask *m) { return m->evict || m->restride > 0; }

int64_t refresh_row_width(const RefreshMask *m, int64_t T) {
    /* without eviction a row keeps every selected key (at most K) plus the
     * local keys since its epoch (at most T-1 - L); never more than p <= T-1 */
    int64_t past = m->evict ? m->K : m->K + T - 1 - m->L;
    return (past < T - 1 ? past : T - 1) + 1;
}

void refresh_row_span(const RefreshMask *m, int64_t p, int64_t since, int64_t nk, int64_t *c, int64_t *first_local) {
    *c = nk;
    *first_local = since;
    if (!m->evict) return;
    int64_t room = m->K - (p - since);
    *c = room < 0 ? 0 : (room < nk ? room : nk);
    if (p - since > m->K) *first_local = p - m->K; /* more new keys than the budget: the oldest go */
}

int refresh_full_row(const RefreshMask *m, int64_t p) {
    return m->restride > 0 && p >= m->L && (p - m->L + 1) % m->restride == 0;
}

int64_t refresh_row_count(const RefreshMask *m, int64_t p) {
    if (p < m->L || refresh_full_row(m, p)) return p + 1;
    int64_t since = m->L, c, first_local;
    if (m->restride > 0) {
        int64_t last_full = m->L - 1 + (p - m->L + 1) / m->restride * m->restride;
        if (last_full >= m->L) since = last_full + 1;
    }
    /* the epoch's selection: top-K of `since` keys */
    refresh_row_span(m, p, since, m->K < since ? m->K : since, &c, &first_local);
    return c + p - first_local + 1;
}

int64_t refresh_sel_len(const RefreshMask *m, int64_t T) {
    if (!refresh_per_row(m)) return refresh_num_selected(m);
    return (T - m->L) * (1 + refresh_row_width(m, T));
}

RefreshMask refresh_mask_off(void) {
    return (RefreshMask){.enabled = 0, .L = 0, .K = 0, .pool_kernel = 1, .agg = GROUP_AGG_MAX, .S = 0};
}

void refresh_mask_validate(const RefreshMask *m, const char *origin) {
    if (!m->enabled) return;
    KV_CHECK(m->L >= 1, "%s: mask field 'L' must be >= 1 (got %lld)", origin, (long long)m->L);
    KV_CHECK(m->K >= 1, "%s: mask field 'K' must be >= 1 (got %lld)", origin, (long long)m->K);
    KV_CHECK(m->K <= m->L, "%s: mask field 'K' (%lld) cannot exceed the prefill length 'L' (%lld)", origin,
             (long long)m->K, (long long)m->L);
    KV_CHECK(m->pool_kernel >= 1 && m->pool_kernel % 2 == 1,
             "%s: mask field 'pool_kernel' must be odd and >= 1 (got %lld)", origin, (long long)m->pool_kernel);
    KV_CHECK(m->agg == GROUP_AGG_MAX || m->agg == GROUP_AGG_MEAN || m->agg == GROUP_AGG_FIRST,
             "%s: mask field 'group_agg' is invalid", origin);
    KV_CHECK(m->evict == 0 || m->evict == 1, "%s: mask field 'evict' must be 0 or 1 (got %d)", origin, m->evict);
    KV_CHECK(m->restride >= 0, "%s: mask field 'restride' must be >= 0 (0: no full rows; got %lld)", origin,
             (long long)m->restride);
}
