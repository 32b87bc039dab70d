/* The PNG charts (common/plot.c) stay readable at their extremes: eval's bar
 * chart for 1, 8 and 20 policies named with the longest real labels, one
 * model (single bars) and two (before/after pairs, also over three
 * contexts), and train's loss curves. For each: gnuplot exits 0 and warns
 * about nothing, the PNG has the size the script asked for and grows with
 * the rows, the legend sits in the top margin above the data area, the
 * labels reach the script unmangled, and nothing drawn touches the canvas
 * edge (a clipped label would; read by tests/png_ink.py).
 * KVCPT_TEST_PLOT_DIR=DIR keeps the charts there to look at. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../common/plot.h"
#include "../../common/subprocess.h"
#include "../../common/util.h"
#include "../testlib.h"

/* labels as eval/policy_*.c write them (the demo's, then the widest each
 * policy makes with large settings) with made-up perplexities before and
 * after CPT of the demo's spread: 1.01 (full) to over a million */
static const struct {
    const char *label;
    double before, after;
} kRows[] = {
    {"kvec (O 1, O' 32, delta 3, lambda 1, beta 0.25)", 1185435.4, 260.18},
    {"full", 1.010, 1.045},
    {"streaming (sinks 4)", 148.46, 69.13},
    {"h2o (recent 1024, heavy 1024, mean)", 12.83, 1.147},
    {"snapkv (window 1024, grow)", 1491.5, 28.30},
    {"tova (mean)", 135949.2, 1104.9},
    {"refreshkv (QC 10, s 0.85)", 1492.2, 28.54},
    {"kvec (O 1024, O' 4096, delta 128, lambda 0.25, beta 0.25, grow)", 2.31, 1.20},
    {"restkv (S_w 1024, alpha 0.3, beta 2000, k 16)", 919.19, 14.77},
    {"refreshkv (fixed stride 25)", 50.82, 6.264},
};
enum { N_LABELS = sizeof kRows / sizeof kRows[0] };

static char dir[4096];
static int keep;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    s[fread(s, 1, (size_t)n, f)] = '\0';
    fclose(f);
    return s;
}

/* width and height from the PNG's IHDR */
static int png_size(const char *path, unsigned *w, unsigned *h) {
    unsigned char b[24];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(b, 1, sizeof b, f);
    fclose(f);
    if (n != sizeof b || memcmp(b, "\x89PNG\r\n\x1a\n", 8) != 0 || memcmp(b + 12, "IHDR", 4) != 0) return 0;
    *w = (unsigned)b[16] << 24 | (unsigned)b[17] << 16 | (unsigned)b[18] << 8 | b[19];
    *h = (unsigned)b[20] << 24 | (unsigned)b[21] << 16 | (unsigned)b[22] << 8 | b[23];
    return 1;
}

static double number_after(const char *s, const char *key) {
    const char *p = s ? strstr(s, key) : NULL;
    return p ? atof(p + strlen(key)) : NAN;
}

/* Checks shared by both charts; `base` is the path without ".png". */
static void check_chart(const char *name, const char *base, int rendered, int min_w, int min_h, int ncols) {
    char png[4200], gp[4200], log[4200], what[512];
    snprintf(png, sizeof png, "%s.png", base);
    snprintf(gp, sizeof gp, "%s.gp", base);
    snprintf(log, sizeof log, "%s.gp.log", base);
    char *script = slurp(gp), *warn = slurp(log);
    snprintf(what, sizeof what, "%s: gnuplot exits 0 and warns about nothing", name);
    tl_result(rendered && warn && !warn[0], what, "rendered %d, gnuplot said: %s", rendered, warn ? warn : "(no log)");

    unsigned w = 0, h = 0;
    const char *size = script ? strstr(script, "pngcairo size ") : NULL;
    int sw = size ? (int)number_after(size, "pngcairo size ") : 0, sh = size ? (int)number_after(size, ",") : 0;
    snprintf(what, sizeof what, "%s: PNG is the size asked for (%dx%d), at least %dx%d", name, sw, sh, min_w, min_h);
    int sized = png_size(png, &w, &h);
    tl_result(sized && (int)w == sw && (int)h == sh && sw >= min_w && sh >= min_h, what, "IHDR %ux%u", w, h);

    /* the legend's top edge and its lines sit between the title and the data area */
    double key_y = number_after(script, "set key at screen 0.5, ");
    double tm = number_after(script, "set tmargin at screen ");
    double maxcols = number_after(script, " maxcols ");
    int key_lines = maxcols >= 1 ? (int)ceil(ncols / maxcols) : 99;
    snprintf(what, sizeof what, "%s: legend above the data area (%d line%s in the top margin)", name, key_lines,
             key_lines == 1 ? "" : "s");
    tl_result(script && strstr(script, "set key at screen") && !strstr(script, " inside") &&
                  (key_y - tm) * sh >= key_lines * 16 && key_y < 1,
              what, "key top %.4f, data area top %.4f, %d px for %d lines", key_y, tm, (int)((key_y - tm) * sh),
              key_lines);

    if (!subprocess_found("python3")) {
        snprintf(what, sizeof what, "%s: nothing drawn at the canvas edge", name);
        tl_skip(what, "no python3 to read the PNG");
    } else {
        const char *argv[] = {"python3", "tests/png_ink.py", png, NULL};
        char out[256] = "";
        int rc = subprocess_run(argv, NULL, NULL, out, sizeof out);
        int iw = 0, ih = 0, l = -1, t = -1, r = -1, b = -1;
        int got = rc == 0 && sscanf(out, "%d %d %d %d %d %d", &iw, &ih, &l, &t, &r, &b) == 6;
        snprintf(what, sizeof what, "%s: nothing drawn at the canvas edge (no clipped label)", name);
        tl_result(got && l >= 2 && t >= 2 && r <= iw - 3 && b <= ih - 3, what,
                  "png_ink.py rc %d: drawn from (%d,%d) to (%d,%d) on %dx%d", rc, l, t, r, b, iw, ih);
    }
    free(script), free(warn);
    if (!keep) {
        const char *ext[] = {".png", ".gp", ".gp.log", ".dat"};
        for (int i = 0; i < 4; i++) {
            char p[4200];
            snprintf(p, sizeof p, "%s%s", base, ext[i]);
            unlink(p);
        }
    }
}

/* eval's bar chart: nrows policies, n_models models over n_ctx contexts */
static void bars_case(int nrows, int n_models, int n_ctx, int with_nan) {
    const char *names[20];
    char extra[20][96];
    double before[20], after[20];
    for (int r = 0; r < nrows; r++) {
        int k = nrows == 1 ? 7 : r; /* alone, the longest label */
        if (k < N_LABELS) {
            names[r] = kRows[k].label, before[r] = kRows[k].before, after[r] = kRows[k].after;
        } else { /* more kvec settings, as a sweep would name them */
            snprintf(extra[r], sizeof extra[r], "kvec (O %d, O' %d, delta %d, lambda %.2g, beta 0.25, grow)",
                     1 << (r % 11), 4096 >> (r % 5), 3 + r, 1.0 / (1 + r % 4));
            names[r] = extra[r], before[r] = 1.5 * pow(10, (r * 7) % 11 / 3.0), after[r] = 1 + (before[r] - 1) / 40;
        }
    }
    int ncols = n_models * n_ctx;
    char cols[6][64];
    const char *col_names[6];
    for (int j = 0; j < ncols; j++) {
        snprintf(cols[j], sizeof cols[j], "context %d%s", 1024 << (j / n_models),
                 n_models == 2 ? (j % 2 ? ": after" : ": before") : "");
        col_names[j] = cols[j];
    }
    double v[20 * 6];
    for (int r = 0; r < nrows; r++)
        for (int j = 0; j < ncols; j++) /* a longer context a little worse */
            v[r * ncols + j] = (n_models == 2 && j % 2 ? after[r] : before[r]) * (1 + 0.1 * (j / n_models));
    if (with_nan) v[ncols + 1] = NAN;
    double ci_lo[20 * 6], ci_hi[20 * 6]; /* a made-up 95% interval around each bar */
    for (int i = 0; i < nrows * ncols; i++) ci_lo[i] = v[i] * 0.9, ci_hi[i] = v[i] * 1.12;

    char base[4200], name[128];
    snprintf(base, sizeof base, "%s/bars_%dx%dx%d", dir, nrows, n_models, n_ctx);
    snprintf(name, sizeof name, "bars, %d polic%s, %d model%s, %d context%s%s", nrows, nrows == 1 ? "y" : "ies",
             n_models, n_models == 1 ? "" : "s", n_ctx, n_ctx == 1 ? "" : "s", with_nan ? ", a NaN" : "");
    char png[4300];
    snprintf(png, sizeof png, "%s.png", base);
    int rendered = plot_bars_png(png, "kvcpt eval: perplexity of the last tokens per KV-cache policy (made-up values)",
                                 "PPL (lower is better)", names, nrows, col_names, ncols, v, ci_lo, ci_hi);

    char gp[4300], what[256];
    snprintf(gp, sizeof gp, "%s.gp", base);
    char *script = slurp(gp);
    /* every name whole, the apostrophe doubled inside gnuplot's quotes; a log axis for the spread */
    int whole = script != NULL;
    for (int r = 0; r < nrows && whole; r++) {
        char q[256], *o = q;
        for (const char *s = names[r]; *s; s++) {
            if (*s == '\'') *o++ = '\'';
            *o++ = *s;
        }
        *o = '\0';
        whole = strstr(script, q) != NULL;
    }
    double lo = INFINITY, hi = 0; /* more than a factor of 100 between bars: a log axis */
    for (int i = 0; i < nrows * ncols; i++)
        if (isfinite(v[i])) lo = fmin(lo, v[i]), hi = fmax(hi, v[i]);
    int want_log = hi / lo > 100;
    snprintf(what, sizeof what, "%s: every policy label whole in the script, value axis %s", name,
             want_log ? "logarithmic" : "linear");
    tl_result(whole && !strstr(script, "set logscale x") == !want_log, what,
              "a label is missing or mangled, or the axis is not %s", want_log ? "logarithmic" : "linear");
    /* the intervals: drawn as error bars from the data file's last two
     * columns, which hold the first bar's interval */
    char datp[4300], *dat;
    snprintf(datp, sizeof datp, "%s.dat", base);
    dat = slurp(datp);
    double f[5] = {NAN, NAN, NAN, NAN, NAN};
    const char *row = dat ? strchr(dat, '\n') : NULL; /* past the "# column" line */
    int got = row && sscanf(row + 1, "%*f %*f %*f %lf %lf \"%*[^\"]\" %lf %lf", &f[0], &f[1], &f[2], &f[3]) == 4;
    snprintf(what, sizeof what, "%s: error bars at the 95%% interval of each bar", name);
    tl_result(script && strstr(script, "using 4:1:7:8 with xerrorbars") && got && f[0] == v[0] &&
                  fabs(f[2] - ci_lo[0]) < 1e-6 * ci_lo[0] && fabs(f[3] - ci_hi[0]) < 1e-6 * ci_hi[0] && f[1] == f[3],
              what, "script %s error bars; first row value %g, interval [%g, %g], number at %g",
              script && strstr(script, "xerrorbars") ? "has" : "has no", f[0], f[2], f[3], f[1]);
    free(script), free(dat);

    /* the names fit left of the bars: at least 5 px a character besides the 620 px data area;
     * each row at least its bars' height */
    size_t longest = 0;
    for (int r = 0; r < nrows; r++) longest = strlen(names[r]) > longest ? strlen(names[r]) : longest;
    check_chart(name, base, rendered, 620 + 5 * (int)longest, nrows * (ncols * 13 + 12), ncols);
}

int main(void) {
    if (!subprocess_found("gnuplot")) {
        tl_skip("plot charts", "gnuplot is not installed (make setup installs gnuplot-nox)");
        return tl_finish();
    }
    const char *kept = getenv("KVCPT_TEST_PLOT_DIR");
    if (kept && *kept) {
        snprintf(dir, sizeof dir, "%s", kept);
        keep = 1;
    } else {
        snprintf(dir, sizeof dir, "%s/kvcpt_plot_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir)) {
            tl_result(0, "temporary directory", "mkdtemp failed");
            return tl_finish();
        }
    }
    /* by default a drawn PNG is all that is left: its script, data and
     * gnuplot's log are removed */
    {
        unsetenv("KVCPT_PLOT_SOURCES");
        double x1[2] = {1, 2}, y1[2] = {3, 4};
        PlotSeries one = {"train", x1, y1, 2};
        char b[4200], p[4300];
        snprintf(b, sizeof b, "%s/alone", dir);
        snprintf(p, sizeof p, "%s.png", b);
        int drawn = plot_lines_png(p, "kvcpt train: loss", "step", "loss", &one, 1, 0);
        int left = 0;
        const char *ext[] = {".gp", ".dat", ".gp.log"};
        for (int i = 0; i < 3; i++) {
            char q[4300];
            snprintf(q, sizeof q, "%s%s", b, ext[i]);
            left += access(q, F_OK) == 0;
        }
        tl_result(drawn && file_size(p) > 0 && left == 0, "a drawn plot leaves only its PNG",
                  "drawn %d, %d of .gp, .dat, .gp.log left", drawn, left);
        unlink(p);
    }
    /* the checks below read the scripts and data: keep them */
    setenv("KVCPT_PLOT_SOURCES", "1", 1);
    int rows[] = {1, 8, 20};
    for (int i = 0; i < 3; i++)
        for (int m = 1; m <= 2; m++) bars_case(rows[i], m, 1, 0);
    bars_case(11, 2, 3, 1); /* three contexts before/after: a legend on three lines; a NaN cell */

    /* train's loss curves: a long run with dev points, and a one-step run */
    enum { N = 3000 };
    static double x[N], y[N], xd[30], yd[30];
    int nd = 0;
    for (int i = 0; i < N; i++) {
        x[i] = i + 1, y[i] = 2 + 8 * exp(-i / 400.0) + 0.2 * sin(i * 1.7);
        if ((i + 1) % 100 == 0) xd[nd] = i + 1, yd[nd++] = 2.2 + 8 * exp(-i / 400.0);
    }
    PlotSeries s[2] = {{"train", x, y, N}, {"dev", xd, yd, nd}};
    char base[4200], png[4300], gp_path[4300];
    snprintf(base, sizeof base, "%s/loss_long", dir);
    snprintf(png, sizeof png, "%s.png", base);
    check_chart("loss, 3000 steps and dev", base,
                plot_lines_png(png, "kvcpt train: loss", "step", "cross-entropy (nats)", s, 2, 0), 900, 560, 2);
    s[0].n = 1;
    snprintf(base, sizeof base, "%s/loss_one", dir);
    snprintf(png, sizeof png, "%s.png", base);
    check_chart("loss, a single step", base,
                plot_lines_png(png, "kvcpt train: loss", "step", "cross-entropy (nats)", s, 1, 0), 900, 560, 1);
    /* eval's per-step curves: 11 policies with their long labels, 32 steps */
    static const char *labels[11] = {"full",
                                     "streaming (sinks 4)",
                                     "h2o (recent 64, heavy 64, max)",
                                     "snapkv (window 1 kept)",
                                     "tova (shared heads, mean, window 1)",
                                     "refreshkv (QC 5, s 0.85)",
                                     "refreshkv (QC 10, s 0.85)",
                                     "refreshkv (fixed stride 10)",
                                     "refreshkv (fixed stride 25)",
                                     "restkv (S_w 32, alpha 0.3, beta 2000, k 5)",
                                     "kvec (O 16, O' 32, delta 3, lambda 1, beta 0.25)"};
    static double sx[32], sy[11][32];
    PlotSeries ps[11];
    for (int i = 0; i < 32; i++) sx[i] = i + 1;
    for (int k = 0; k < 11; k++) {
        for (int i = 0; i < 32; i++) sy[k][i] = fmod(0.37 * k + 0.11 * i, 1.0);
        ps[k] = (PlotSeries){labels[k], sx, sy[k], 32};
    }
    snprintf(base, sizeof base, "%s/steps", dir);
    snprintf(png, sizeof png, "%s.png", base);
    int steps_rc =
        plot_lines_png(png, "kvcpt eval: top-1 accuracy per decode step", "decode step", "top-1 accuracy", ps, 11, 0);
    /* read the script before check_chart removes it */
    snprintf(gp_path, sizeof gp_path, "%s.gp", base);
    char *script = slurp(gp_path);
    check_chart("per-step curves, 11 policies", base, steps_rc, 900, 560, 11);
    /* curves 9 to 11 reuse colours 1 to 3: they must differ in dash and point type */
    tl_result(script && strstr(script, "lc 1 dt 2") && strstr(script, "lc 3 dt 2") && strstr(script, "pt 5"),
              "per-step curves: past 8 colours the curves get another dash pattern and point type", "");
    free(script);
    /* eval's per-step PPL: one step's spike of 60000 over curves near 2 to
     * 20 gets a log axis, so the others are not flattened; a curve with a
     * value <= 0 cannot have one */
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 32; i++) sy[k][i] = 2 + 6 * k + 0.5 * sin(i + k);
        ps[k] = (PlotSeries){labels[k], sx, sy[k], 32};
    }
    sy[1][7] = 60000;
    for (int z = 0; z < 2; z++) {
        if (z) sy[2][3] = 0;
        snprintf(base, sizeof base, "%s/steps_ppl%d", dir, z);
        snprintf(png, sizeof png, "%s.png", base);
        steps_rc =
            plot_lines_png(png, "kvcpt eval: PPL per decode step", "decode step", "PPL over documents", ps, 3, 1);
        snprintf(gp_path, sizeof gp_path, "%s.gp", base);
        script = slurp(gp_path);
        check_chart(z ? "per-step PPL with a zero" : "per-step PPL with a spike", base, steps_rc, 900, 560, 3);
        int log_axis = script && strstr(script, "set logscale y") && strstr(script, "PPL over documents, log scale");
        tl_result(z ? script && !log_axis : log_axis,
                  z ? "per-step PPL: a value of 0 keeps a linear axis"
                    : "per-step PPL: a log y axis, said in its label",
                  "the script %s a log y axis", log_axis ? "has" : "has no");
        free(script);
    }
    if (!keep) rmdir(dir);
    return tl_finish();
}
