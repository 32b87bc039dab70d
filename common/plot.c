#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "subprocess.h"
#include "util.h"

/* "dir/name.png" -> "dir/name" + ext */
static void sibling(char *out, size_t n, const char *png, const char *ext) {
    snprintf(out, n, "%s", png);
    char *dot = strrchr(out, '.');
    if (dot && strcmp(dot, ".png") == 0) *dot = '\0';
    strncat(out, ext, n - strlen(out) - 1);
}

/* The script, its data and gnuplot's log are kept only when asked for
 * (KVCPT_PLOT_SOURCES=1, to restyle a plot) or when no PNG came of them
 * (to render it by hand or read what went wrong): a run's directory holds
 * the PNG, not its ingredients. */
static int keep_sources(void) {
    const char *v = getenv("KVCPT_PLOT_SOURCES");
    return v && strcmp(v, "1") == 0;
}

static void remove_sources(const char *gp_path, const char *dat_path, const char *log_path) {
    const char *paths[] = {gp_path, dat_path, log_path};
    for (int i = 0; i < 3; i++)
        if (unlink(paths[i]) != 0 && errno != ENOENT) warnf("cannot remove %s: %s", paths[i], strerror(errno));
}

static int render(const char *gp_path, const char *dat_path, const char *png_path) {
    if (!subprocess_found("gnuplot")) {
        warnf("gnuplot not found: %s not rendered; install gnuplot-nox ('make setup') and run 'gnuplot %s'", png_path,
              gp_path);
        return 0;
    }
    char log[4200], script[4200];
    path_fmt(log, sizeof log, "%s.log", gp_path);
    /* a relative path beginning with '-' would reach gnuplot as an option
     * (and "-" as standard input): "./" makes it a file name */
    path_fmt(script, sizeof script, "%s%s", gp_path[0] == '/' ? "" : "./", gp_path);
    /* an earlier PNG must not pass for this one if gnuplot draws nothing */
    if (unlink(png_path) != 0 && errno != ENOENT) {
        warnf("%s not drawn: cannot remove the earlier one: %s", png_path, strerror(errno));
        return 0;
    }
    const char *argv[] = {"gnuplot", script, NULL};
    if (subprocess_run(argv, NULL, log, NULL, 0) != 0) {
        warnf("gnuplot failed on %s: %s not drawn (see %s)", gp_path, png_path, log);
        return 0;
    }
    if (file_size(png_path) <= 0) {
        warnf("gnuplot ended without drawing %s (see %s)", png_path, log);
        return 0;
    }
    /* gnuplot reports what it adjusted or dropped on stderr: say so, and
     * keep the log and what it was drawn from */
    int warned = 0;
    FILE *lf = fopen(log, "r");
    if (lf) {
        warned = fgetc(lf) != EOF;
        fclose(lf);
    }
    if (warned) warnf("gnuplot drew %s with warnings (see %s)", png_path, log);
    else if (!keep_sources()) remove_sources(gp_path, dat_path, log);
    return 1;
}

/* A path with a line break cannot go into a gnuplot script (it would end
 * the command): the plot is not drawn, and the caller goes on. */
static int path_plottable(const char *png_path) {
    if (!strpbrk(png_path, "\r\n")) return 1;
    warnf("%s not drawn: a path with a line break cannot be written into a gnuplot script", png_path);
    return 0;
}

/* s as a gnuplot single-quoted string: a quote is doubled there (line
 * breaks were refused by path_plottable). */
static void gp_quoted(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s, f);
    }
    fputc('\'', f);
}

/* Text (a title, a name) as a gnuplot single-quoted string; a line break
 * becomes a space. */
static void gp_text(FILE *f, const char *s) {
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'') fputc('\'', f);
        fputc(*s == '\r' || *s == '\n' ? ' ' : *s, f);
    }
    fputc('\'', f);
}

static void quote_free(char *dst, size_t n, const char *s) {
    size_t j = 0;
    for (size_t i = 0; s[i] && j + 1 < n; i++) dst[j++] = strchr("\"'\r\n", s[i]) ? ' ' : s[i];
    dst[j] = '\0';
}

/* Layout shared by both charts: the title on the first line of the canvas,
 * the legend under it, both in the top margin, over no data. */
enum { TITLE_PX = 34, KEY_ROW_PX = 20 };

static void title_and_key(FILE *f, const char *title, int height, int key_rows, int per_line) {
    fprintf(f, "set label 1 ");
    gp_text(f, title);
    fprintf(f, " at screen 0.5, %.6f center front\n", 1 - 18.0 / height);
    fprintf(f, "set key at screen 0.5, %.6f center top horizontal maxcols %d samplen 2 noautotitle\n",
            1 - (double)TITLE_PX / height, per_line);
    fprintf(f, "set tmargin at screen %.6f\n", 1 - (double)(TITLE_PX + key_rows * KEY_ROW_PX + 12) / height);
}

static int text_px(const char *s);

/* Point types and dash patterns for the curves past gnuplot's 8 colours, so
 * no two of up to 40 curves look alike. */
static const int POINT_TYPES[] = {7, 5, 9, 11, 13};

int plot_lines_png(const char *png_path, const char *title, const char *xlabel, const char *ylabel,
                   const PlotSeries *series, int nseries, int logy) {
    if (!path_plottable(png_path)) return 0;
    char dat[4096], gp[4096], t[256];
    sibling(dat, sizeof dat, png_path, ".dat");
    sibling(gp, sizeof gp, png_path, ".gp");
    /* series without a point are left out (gnuplot stops at an empty block) */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    int any_nonpositive = 0;
    FILE *f = fopen_check(dat, "w");
    for (int s = 0; s < nseries; s++) {
        if (series[s].n == 0) continue;
        quote_free(t, sizeof t, series[s].name);
        fprintf(f, "# %s\n", t);
        for (int64_t i = 0; i < series[s].n; i++) {
            double x = series[s].x[i], y = series[s].y[i];
            fprintf(f, "%.10g %.10g\n", x, y);
            if (isfinite(x) && isfinite(y)) x0 = fmin(x0, x), x1 = fmax(x1, x), y0 = fmin(y0, y), y1 = fmax(y1, y);
            any_nonpositive = any_nonpositive || (isfinite(y) && y <= 0);
        }
        fprintf(f, "\n\n");
    }
    fclose_check(f, dat);
    /* the legend: as many entries per line as the widest name allows, the
     * canvas taller by one key row per extra line */
    const int width = 900;
    int widest = 0;
    for (int s = 0; s < nseries; s++) widest = text_px(series[s].name) > widest ? text_px(series[s].name) : widest;
    int per_line = (width - 40) / (widest + 60);
    per_line = per_line < 1 ? 1 : per_line > nseries ? (nseries > 0 ? nseries : 1) : per_line;
    int key_rows = nseries > 0 ? (nseries + per_line - 1) / per_line : 1;
    const int height = 560 + (key_rows - 1) * KEY_ROW_PX;
    f = fopen_check(gp, "w");
    fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'sans,10'\nset output ", width, height);
    gp_quoted(f, png_path);
    fprintf(f, "\n");
    title_and_key(f, title, height, key_rows, per_line);
    fprintf(f, "set xlabel ");
    gp_text(f, xlabel);
    /* a log axis only over positive values (gnuplot drops the others) */
    logy = logy && !any_nonpositive && y0 <= y1;
    char yl[300];
    snprintf(yl, sizeof yl, "%s%s", ylabel, logy ? ", log scale" : "");
    fprintf(f, "\nset ylabel ");
    gp_text(f, yl);
    fprintf(f, "\nset grid\n%s", logy ? "set logscale y\nset format y '%g'\n" : "");
    /* a single point (a one-step run) has no range to scale: give it one */
    if (!(x0 <= x1)) x0 = 0, x1 = 1;
    if (!(y0 <= y1)) y0 = 0, y1 = 1;
    if (x0 == x1) fprintf(f, "set xrange [%.10g:%.10g]\n", x0 - 1, x1 + 1);
    if (y0 == y1 && logy) fprintf(f, "set yrange [%.10g:%.10g]\n", y0 / 2, y1 * 2);
    else if (y0 == y1)
        fprintf(f, "set yrange [%.10g:%.10g]\n", y0 - 0.5 * fmax(1, fabs(y0)), y1 + 0.5 * fmax(1, fabs(y1)));
    fprintf(f, "plot ");
    int block = 0;
    for (int s = 0; s < nseries; s++) {
        if (series[s].n == 0) continue;
        fprintf(f, "%s", block ? ", \\\n     " : "");
        gp_quoted(f, dat);
        /* a few points (dev evaluations, a short run) are marked, a long curve is a line */
        fprintf(f, " index %d with %s lc %d dt %d", block++,
                series[s].n <= 50 ? "linespoints ps 0.6 lw 2" : "lines lw 1.5", s % 8 + 1, s / 8 % 5 + 1);
        if (series[s].n <= 50) fprintf(f, " pt %d", POINT_TYPES[s / 8 % 5]);
        fprintf(f, " title ");
        gp_text(f, series[s].name);
    }
    if (block == 0) fprintf(f, "NaN notitle");
    fprintf(f, "\n");
    fclose_check(f, gp);
    return render(gp, dat, png_path);
}

/* A bar's number: digits enough to tell close perplexities apart, an
 * exponent only from a million on. */
static void value_text(char *out, size_t n, double v) {
    double a = fabs(v);
    if (isnan(v)) snprintf(out, n, "not finite (NaN)");
    else if (isinf(v)) snprintf(out, n, "not finite (%sinf)", v < 0 ? "-" : "");
    else snprintf(out, n, a < 10 ? "%.3f" : a < 100 ? "%.2f" : a < 1000 ? "%.1f" : a < 1e6 ? "%.0f" : "%.3g", v);
}

/* Layout of the bar chart in pixels. The canvas grows with the rows and with
 * the longest row name instead of squeezing them: every row gets the same
 * height, the names a left margin sized from their drawn width, the title
 * and the legend the top margin, above the bars. */
enum { BAR_PX = 13, MIN_ROW_PX = 30, PLOT_W = 620, BOTTOM_PX = 58, RIGHT_PX = 30 };

/* An upper bound of the width of s drawn in the 10 pt sans font (DejaVu Sans
 * at 13.3 px per em): each character by its class, rounded up. */
static int text_px(const char *s) {
    int px = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p >= 0x80) px += (*p & 0xC0) == 0x80 ? 0 : 14; /* a UTF-8 character, counted once, as wide */
        else if (strchr("ijl'.,:;|! ", *p)) px += 5;
        else if (strchr("ftrI()[]{}-_\"/\\`", *p)) px += 7;
        else if (strchr("mwMW%@", *p)) px += 14;
        else if (*p >= 'A' && *p <= 'Z') px += 11;
        else px += 9;
    }
    return px;
}

int plot_bars_png(const char *png_path, const char *title, const char *value_label, const char *const *row_names,
                  int nrows, const char *const *col_names, int ncols, const double *values, const double *lo_v,
                  const double *hi_v) {
    KV_CHECK(nrows > 0 && ncols > 0, "plot: a bar chart needs a row and a column (got %d x %d)", nrows, ncols);
    if (!path_plottable(png_path)) return 0;
    char dat[4096], gp[4096], t[256];
    sibling(dat, sizeof dat, png_path, ".dat");
    sibling(gp, sizeof gp, png_path, ".gp");

    /* the value axis: logarithmic when the (all positive) values span more
     * than a factor of 100, so a 1.01 still shows beside a 1e6; its far end
     * leaves room right of the longest bar for its number */
    int64_t nv = (int64_t)nrows * ncols;
    double lo = INFINITY, hi = -INFINITY;
    int any_finite = 0, all_positive = 1;
    for (int64_t i = 0; i < nv; i++) {
        if (!isfinite(values[i])) continue;
        any_finite = 1, all_positive = all_positive && values[i] > 0;
        lo = fmin(lo, values[i]), hi = fmax(hi, values[i]);
        /* the interval's ends are on the axis too */
        if (lo_v && hi_v && isfinite(lo_v[i]) && isfinite(hi_v[i]) && lo_v[i] > 0)
            lo = fmin(lo, lo_v[i]), hi = fmax(hi, hi_v[i]);
    }
    int logx = any_finite && all_positive && hi / lo > 100;
    const double room = 0.16; /* share of the axis right of the longest bar */
    double xmin, xmax;
    if (logx) {
        xmin = pow(10, floor(log10(lo) - 0.05)); /* a decade edge below the shortest bar */
        xmax = pow(10, log10(xmin) + (log10(hi) - log10(xmin)) / (1 - room));
    } else {
        xmin = any_finite ? fmin(0, lo) : 0;
        double top = any_finite ? fmax(hi, 0) : 1;
        if (top <= xmin) top = xmin + 1;
        xmax = xmin + (top - xmin) / (1 - room);
    }

    double base = logx ? xmin : 0; /* where the bars start */
    /* one block per column, bars of a row top to bottom in column order:
     * y centre, y extent, value (NaN: no bar), where its number goes, the
     * number, the interval's ends (NaN: none) */
    const double band = 0.8, h = band / ncols;
    FILE *f = fopen_check(dat, "w");
    for (int c = 0; c < ncols; c++) {
        quote_free(t, sizeof t, col_names[c]);
        fprintf(f, "# %s\n", t);
        for (int r = 0; r < nrows; r++) {
            double v = values[(int64_t)r * ncols + c];
            double y = (nrows - 1 - r) + band / 2 - h * (c + 0.5);
            char num[64];
            value_text(num, sizeof num, v);
            int64_t k = (int64_t)r * ncols + c;
            double e0 = lo_v && hi_v && isfinite(v) && isfinite(lo_v[k]) && isfinite(hi_v[k]) ? lo_v[k] : NAN;
            double e1 = isfinite(e0) ? hi_v[k] : NAN;
            fprintf(f, "%.6f %.6f %.6f ", y, y - h / 2, y + h / 2);
            if (isfinite(v))
                fprintf(f, "%.10g %.10g", v, isfinite(e1) && e1 > v ? e1 : v); /* the number right of the bar */
            else fprintf(f, "NaN %.10g", base);
            fprintf(f, " \"%s\" ", num);
            if (isfinite(e0)) fprintf(f, "%.10g %.10g\n", e0, e1);
            else fprintf(f, "NaN NaN\n");
        }
        fprintf(f, "\n\n");
    }
    fclose_check(f, dat);

    int name_px = 0, key_px = 0;
    for (int r = 0; r < nrows; r++) name_px = text_px(row_names[r]) > name_px ? text_px(row_names[r]) : name_px;
    for (int c = 0; c < ncols; c++) key_px = text_px(col_names[c]) > key_px ? text_px(col_names[c]) : key_px;
    int left = name_px + 30; /* room for the gap between the names and the axis */
    int width = left + PLOT_W + RIGHT_PX;
    if (text_px(title) + 40 > width) width = text_px(title) + 40;
    /* legend entries side by side, as many to a line as fit over the bars;
     * gnuplot fits (name length + 6) characters of 8 px per entry (its own
     * estimate for this font), so asking for no more keeps the count ours */
    int key_chars = 0;
    for (int c = 0; c < ncols; c++)
        if ((int)strlen(col_names[c]) > key_chars) key_chars = (int)strlen(col_names[c]);
    int entry_px = key_px + 50 > (key_chars + 6) * 8 ? key_px + 50 : (key_chars + 6) * 8;
    int per_line = PLOT_W / entry_px;
    if (per_line < 1) per_line = 1;
    if (per_line > ncols) per_line = ncols;
    int key_rows = (ncols + per_line - 1) / per_line;
    int row_px = ncols * BAR_PX + 12 > MIN_ROW_PX ? ncols * BAR_PX + 12 : MIN_ROW_PX;
    int top = TITLE_PX + key_rows * KEY_ROW_PX + 12;
    int height = top + nrows * row_px + BOTTOM_PX;

    f = fopen_check(gp, "w");
    fprintf(f, "set terminal pngcairo size %d,%d noenhanced font 'sans,10'\nset output ", width, height);
    gp_quoted(f, png_path);
    fprintf(f, "\n");
    title_and_key(f, title, height, key_rows, per_line);
    fprintf(f, "set lmargin at screen %.6f\nset rmargin at screen %.6f\nset bmargin at screen %.6f\n",
            (double)left / width, (double)(left + PLOT_W) / width, (double)BOTTOM_PX / height);
    fprintf(f, "set xlabel ");
    snprintf(t, sizeof t, "%s%s", value_label, logx ? ", log scale" : "");
    gp_text(f, t);
    fprintf(f, "\nset xrange [%.10g:%.10g]\n%s", xmin, xmax, logx ? "set logscale x\nset format x '%g'\n" : "");
    fprintf(f, "set yrange [-0.5:%d.5]\nset grid xtics\nset xtics nomirror\nset ytics nomirror scale 0 (", nrows - 1);
    for (int r = 0; r < nrows; r++) {
        fprintf(f, "%s", r ? ", " : "");
        gp_text(f, row_names[r]);
        fprintf(f, " %d", nrows - 1 - r);
    }
    fprintf(f, ")\nset style fill solid 0.85 border -1\nplot ");
    for (int c = 0; c < ncols; c++) {
        fprintf(f, "%s", c ? ", \\\n     " : "");
        gp_quoted(f, dat);
        fprintf(f, " index %d using (%.10g):1:(%.10g):4:2:3 with boxxyerror lc %d title ", c, base, base, c + 1);
        gp_text(f, col_names[c]);
    }
    /* the 95% intervals as error bars over the bars (x, y, low, high) */
    for (int c = 0; c < ncols && lo_v && hi_v; c++) {
        fprintf(f, ", \\\n     ");
        gp_quoted(f, dat);
        fprintf(f, " index %d using 4:1:7:8 with xerrorbars lc rgb 'black' lw 1 pt 0 ps 0 notitle", c);
    }
    for (int c = 0; c < ncols; c++) {
        fprintf(f, ", \\\n     ");
        gp_quoted(f, dat);
        fprintf(f, " index %d using 5:1:6 with labels left offset 0.6,0 notitle", c);
    }
    fprintf(f, "\n");
    fclose_check(f, gp);
    return render(gp, dat, png_path);
}
