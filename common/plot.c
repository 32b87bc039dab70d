#include "plot.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "subprocess.h"
#include "util.h"

/* "dir/name.png" -> "dir/name" + ext */
static void sibling(char *out, size_t n, const char *png, const char *ext) {
    snprintf(out, n, "%s", png);
    char *dot = strrchr(out, '.');
    if (dot && strcmp(dot, ".png") == 0) *dot = '\0';
    strncat(out, ext, n - strlen(out) - 1);
}

static int render(const char *gp_path, const char *png_path) {
    if (!subprocess_found("gnuplot")) {
        warnf("gnuplot not found: %s not rendered; install gnuplot-nox ('make setup') and run 'gnuplot %s'", png_path,
              gp_path);
        return 0;
    }
    char log[4200];
    KV_CHECK(snprintf(log, sizeof log, "%s.log", gp_path) < (int)sizeof log, "plot: path too long: %s", gp_path);
    const char *argv[] = {"gnuplot", gp_path, NULL};
    if (subprocess_run(argv, NULL, log, NULL, 0) != 0) {
        warnf("gnuplot failed on %s (see %s)", gp_path, log);
        return 0;
    }
    return 1;
}

/* s as a gnuplot single-quoted string: a quote is doubled there, and a line
 * break (which would end the command) is refused. */
static void gp_quoted(FILE *f, const char *s) {
    KV_CHECK(!strpbrk(s, "\r\n"), "plot: a path with a line break cannot be written into a gnuplot script: %s", s);
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

static void quote_free(char *dst, size_t n, const char *s) {
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 1 < n; i++) dst[j++] = s[i] == '"' || s[i] == '\'' ? ' ' : s[i];
    dst[j] = '\0';
}

int plot_lines_png(const char *png_path, const char *title, const char *xlabel, const char *ylabel,
                   const PlotSeries *series, int nseries) {
    char dat[4096], gp[4096], t[256];
    sibling(dat, sizeof dat, png_path, ".dat");
    sibling(gp, sizeof gp, png_path, ".gp");
    FILE *f = fopen_check(dat, "w");
    for (int s = 0; s < nseries; s++) {
        fprintf(f, "# %s\n", series[s].name);
        for (int64_t i = 0; i < series[s].n; i++) fprintf(f, "%.10g %.10g\n", series[s].x[i], series[s].y[i]);
        fprintf(f, "\n\n");
    }
    fclose_check(f, dat);
    f = fopen_check(gp, "w");
    quote_free(t, sizeof t, title);
    fprintf(f, "set terminal pngcairo size 900,560 noenhanced\nset output ");
    gp_quoted(f, png_path);
    fprintf(f, "\nset title '%s'\n", t);
    fprintf(f, "set xlabel '%s'\nset ylabel '%s'\nset grid\nset key outside right\n", xlabel, ylabel);
    fprintf(f, "plot ");
    for (int s = 0; s < nseries; s++) {
        quote_free(t, sizeof t, series[s].name);
        fprintf(f, "%s", s ? ", " : "");
        gp_quoted(f, dat);
        fprintf(f, " index %d with lines lw 2 title '%s'", s, t);
    }
    fprintf(f, "\n");
    fclose_check(f, gp);
    return render(gp, png_path);
}

int plot_bars_png(const char *png_path, const char *title, const char *ylabel, const char *const *row_names,
                  int nrows, const char *const *col_names, int ncols, const double *values) {
    char dat[4096], gp[4096], t[256];
    sibling(dat, sizeof dat, png_path, ".dat");
    sibling(gp, sizeof gp, png_path, ".gp");
    FILE *f = fopen_check(dat, "w");
    fprintf(f, "row");
    for (int c = 0; c < ncols; c++) {
        quote_free(t, sizeof t, col_names[c]);
        fprintf(f, " \"%s\"", t);
    }
    fprintf(f, "\n");
    for (int r = 0; r < nrows; r++) {
        quote_free(t, sizeof t, row_names[r]);
        fprintf(f, "\"%s\"", t);
        for (int c = 0; c < ncols; c++) fprintf(f, " %.10g", values[r * ncols + c]);
        fprintf(f, "\n");
    }
    fclose_check(f, dat);
    f = fopen_check(gp, "w");
    quote_free(t, sizeof t, title);
    fprintf(f, "set terminal pngcairo size 1000,560 noenhanced\nset output ");
    gp_quoted(f, png_path);
    fprintf(f, "\nset title '%s'\n", t);
    fprintf(f, "set ylabel '%s'\nset style data histograms\nset style histogram clustered gap 1\n", ylabel);
    fprintf(f, "set style fill solid 0.85 border -1\nset grid ytics\nset xtics rotate by -25\nset key outside right\n");
    /* values spanning orders of magnitude (perplexities from 1 to 1e6) only read on a log axis */
    double lo = INFINITY, hi = 0;
    for (int64_t i = 0; i < (int64_t)nrows * ncols; i++)
        if (isfinite(values[i]) && values[i] > 0) lo = values[i] < lo ? values[i] : lo, hi = values[i] > hi ? values[i] : hi;
    if (hi > 0 && hi / lo > 100) fprintf(f, "set logscale y\nset yrange [%g:*]\n", lo / 1.5);
    fprintf(f, "plot for [c=2:%d] ", ncols + 1);
    gp_quoted(f, dat);
    fprintf(f, " using c:xtic(1) title columnheader(c)\n");
    fclose_check(f, gp);
    return render(gp, png_path);
}
