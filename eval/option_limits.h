#ifndef KVCPT_EVAL_OPTION_LIMITS_H
#define KVCPT_EVAL_OPTION_LIMITS_H
/* Ranges of the policy options typed on the command line, shared by
 * `kvcpt eval`, `kvcpt bench decode` and `kvcpt bench eval`, so that a value
 * is refused the same way wherever it is given, and before any model is
 * loaded. Each check dies with a message naming the command, the option,
 * the value and the accepted range. */
#include <stdint.h>

/* Prefill query rows whose attention the decode engines keep for the
 * policies' observation windows (ReST-KV's S_w = 32). A window above it
 * would run clamped to it while its label showed the asked value. */
#define EVAL_PREFILL_ROWS 32
/* The widest pooling kernel accepted. SnapKV's and kvpress's kernels are 5
 * and 7; a bound far above them keeps a typo or a wrapped value from passing
 * for a width (kernel / 2 is added to positions). */
#define EVAL_POOL_KERNEL_MAX 1023

/* --snapkv-kernel: odd (a kernel centred on the position: train's
 * pool_kernel rule), >= 1 and <= EVAL_POOL_KERNEL_MAX. */
void eval_check_pool_kernel(const char *cmd, int64_t kernel);
/* An observation window (--snapkv-window, --tova-window, --kvec-window):
 * 1 .. EVAL_PREFILL_ROWS prefill queries. */
void eval_check_window(const char *cmd, const char *option, int64_t window);
/* --sinks: >= 0 StreamingLLM sink tokens. */
void eval_check_sinks(const char *cmd, int64_t sinks);
/* The policy options `kvcpt eval` and `kvcpt bench eval` both take
 * (--snapkv-kernel, --snapkv-window, --sinks), checked in that order. */
void eval_check_shared_policy_options(const char *cmd, int64_t pool_kernel, int64_t snapkv_window, int64_t sinks);
/* n refreshkv strides of `option` (--refresh-fixed, --refresh-qc): each
 * >= 1 (a stride of 0 would never refresh). */
void eval_check_strides(const char *cmd, const char *option, const int64_t *strides, int n);
#endif
