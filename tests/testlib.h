#ifndef KVCPT_TESTLIB_H
#define KVCPT_TESTLIB_H
/* Minimal test harness: each check prints "ok - name" or "FAIL - name: why";
 * tests/run.sh adds them up. A test binary exits non-zero if any check failed. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tl_passed __attribute__((unused)), tl_failed __attribute__((unused)), tl_skipped __attribute__((unused));

static inline void tl_result(int ok, const char *name, const char *fmt, ...) {
    if (ok) {
        printf("ok - %s\n", name);
        tl_passed++;
        fflush(stdout);
        return;
    }
    printf("FAIL - %s: ", name);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    tl_failed++;
}

/* KVCPT_TEST_CASES="a|b|...": only the cases whose label contains one of
 * these texts run (a slow build variant, such as the race detector's, runs
 * a few representative cases of a long suite); unset, every case runs. A
 * text that starts with ^ must start the label: "^parity: x" picks
 * "parity: x" and not "bf16 parity: x", which contains it. */
static inline int tl_case_selected(const char *label) {
    const char *sel = getenv("KVCPT_TEST_CASES");
    if (!sel || !*sel) return 1;
    for (const char *p = sel; *p;) {
        size_t n = strcspn(p, "|");
        if (n > 1 && p[0] == '^') {
            if (strncmp(label, p + 1, n - 1) == 0) return 1;
        } else {
            for (const char *l = label; n > 0 && *l; l++)
                if (strncmp(l, p, n) == 0) return 1;
        }
        p += n;
        if (*p == '|') p++;
    }
    return 0;
}

static inline void tl_skip(const char *name, const char *why) {
    printf("skip - %s: %s\n", name, why);
    tl_skipped++;
}

/* Elementwise |got - ref| <= atol + rtol*|ref|; reports the worst element. */
static inline int tl_close(const char *name, const float *got, const float *ref, int64_t n, double atol, double rtol) {
    int64_t worst = -1, bad = 0;
    double worst_excess = 0, max_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        double lim = atol + rtol * fabs((double)ref[i]);
        if (d > max_abs || isnan(d)) max_abs = d;
        if (!(d <= lim)) {
            bad++;
            if (worst < 0 || d - lim > worst_excess || isnan(d)) worst = i, worst_excess = d - lim;
        }
    }
    if (bad == 0) {
        tl_result(1, name, "");
        return 1;
    }
    tl_result(0, name,
              "%lld of %lld elements outside atol %.1e + rtol %.1e; worst [%lld] got %.9g ref %.9g (max |d| %.3e)",
              (long long)bad, (long long)n, atol, rtol, (long long)worst, got[worst], ref[worst], max_abs);
    return 0;
}

/* tl_close, after a "# margin" line with the worst |got - ref| / (atol +
 * rtol |ref|): how much of the allowance the comparison used, so the first
 * runs on new hardware can recalibrate a tolerance table. */
static inline int tl_close_margin(const char *name, const float *got, const float *ref, int64_t n, double atol,
                                  double rtol) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double ratio = fabs((double)got[i] - (double)ref[i]) / (atol + rtol * fabs((double)ref[i]));
        if (ratio > worst || isnan(ratio)) worst = ratio;
    }
    printf("# margin %s: worst error is %.3g of the allowance\n", name, worst);
    return tl_close(name, got, ref, n, atol, rtol);
}

/* Bitwise equality of float arrays. */
static inline int tl_identical(const char *name, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } x = {a[i]}, y = {b[i]};
        if (x.u != y.u) {
            tl_result(0, name, "element %lld differs: %.9g vs %.9g", (long long)i, a[i], b[i]);
            return 0;
        }
    }
    tl_result(1, name, "");
    return 1;
}

static inline int tl_finish(void) {
    printf("# %d passed, %d failed, %d skipped\n", tl_passed, tl_failed, tl_skipped);
    return tl_failed ? 1 : 0;
}

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs fn(arg) in a child; passes when the child exits non-zero and its
 * stderr contains `expect` (the error must name what is wrong). */
static inline int tl_expect_death(const char *name, void (*fn)(void *), void *arg, const char *expect) {
    int fds[2];
    if (pipe(fds) != 0) {
        tl_result(0, name, "pipe failed");
        return 0;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    size_t len = 0;
    ssize_t r;
    while ((r = read(fds[0], buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)r;
    buf[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    int died = WIFEXITED(status) && WEXITSTATUS(status) != 0;
    int ok = died && strstr(buf, expect) != NULL;
    tl_result(ok, name, "%s; stderr was: %s", died ? "message lacks the expected text" : "did not fail", buf);
    return ok;
}
#endif
