#include "option_limits.h"

#include "../common/util.h"

void eval_check_pool_kernel(const char *cmd, int64_t kernel) {
    KV_CHECK(kernel >= 1 && kernel <= EVAL_POOL_KERNEL_MAX && kernel % 2 == 1,
             "%s: --snapkv-kernel %lld: the pooling kernel must be odd, >= 1 and <= %d (it is centred on each "
             "position)",
             cmd, (long long)kernel, EVAL_POOL_KERNEL_MAX);
}

void eval_check_window(const char *cmd, const char *option, int64_t window) {
    KV_CHECK(window >= 1 && window <= EVAL_PREFILL_ROWS,
             "%s: %s %lld: the window must be in [1, %d], the prefill query rows kept for the policies", cmd, option,
             (long long)window, EVAL_PREFILL_ROWS);
}

void eval_check_sinks(const char *cmd, int64_t sinks) {
    KV_CHECK(sinks >= 0, "%s: --sinks %lld: the count of sink tokens must be >= 0", cmd, (long long)sinks);
}

void eval_check_shared_policy_options(const char *cmd, int64_t pool_kernel, int64_t snapkv_window, int64_t sinks) {
    eval_check_pool_kernel(cmd, pool_kernel);
    eval_check_window(cmd, "--snapkv-window", snapkv_window);
    eval_check_sinks(cmd, sinks);
}

void eval_check_strides(const char *cmd, const char *option, const int64_t *strides, int n) {
    for (int i = 0; i < n; i++)
        KV_CHECK(strides[i] >= 1, "%s: %s %lld: a refreshkv stride must be >= 1 (0 would never refresh)", cmd, option,
                 (long long)strides[i]);
}
