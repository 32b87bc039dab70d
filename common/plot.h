#ifndef KVCPT_PLOT_H
#define KVCPT_PLOT_H
/* PNG line and bar charts through gnuplot (Debian's gnuplot-nox). The data
 * and the script are written beside the PNG (name.dat, name.gp) and removed
 * once the PNG is drawn, unless KVCPT_PLOT_SOURCES=1 keeps them to restyle
 * it; when no PNG came of them (no gnuplot, a failure, gnuplot's warnings)
 * they stay, and a warning says where and why. */
#include <stdint.h>

typedef struct {
    const char *name;
    const double *x, *y;
    int64_t n;
} PlotSeries;

/* Returns 1 when the PNG was rendered (so does plot_bars_png), 0 after a
 * warning saying why not (no gnuplot, gnuplot failed or drew nothing, a
 * path with a line break): callers say the plot was not drawn. Both charts
 * put the title and the legend above the data area. */
/* logy: a logarithmic y axis (when every finite y is positive), so that one
 * spike does not flatten the other curves. */
int plot_lines_png(const char *png_path, const char *title, const char *xlabel, const char *ylabel,
                   const PlotSeries *series, int nseries, int logy);

/* Grouped horizontal bars, one band per row: rows are categories (e.g.
 * policies, named on the left, first on top), columns are groups (e.g.
 * "context 8192: before", "context 8192: after"; the legend); values
 * row-major (nrows x ncols), each bar labelled with its number, a non-finite
 * one with "not finite". The canvas grows with the rows and the longest row
 * name; the value axis is logarithmic when positive values span more than a
 * factor of 100. lo and hi (row-major as values, or both NULL) are drawn as
 * error bars, e.g. a 95% interval; a non-finite end draws none. */
int plot_bars_png(const char *png_path, const char *title, const char *value_label, const char *const *row_names,
                  int nrows, const char *const *col_names, int ncols, const double *values, const double *lo,
                  const double *hi);
#endif
