#ifndef KVCPT_PLOT_H
#define KVCPT_PLOT_H
/* PNG line and bar charts through gnuplot (Debian's gnuplot-nox). The data
 * and the script are written beside the PNG (name.dat, name.gp) so a plot
 * can be re-rendered or restyled; without gnuplot they are still written and
 * a warning says how to render them. */
#include <stdint.h>

typedef struct {
    const char *name;
    const double *x, *y;
    int64_t n;
} PlotSeries;

/* Returns 1 when the PNG was rendered. */
int plot_lines_png(const char *png_path, const char *title, const char *xlabel, const char *ylabel,
                   const PlotSeries *series, int nseries);

/* Grouped bars: rows are categories (e.g. policies), columns are groups
 * (e.g. "8k before", "8k after"); values row-major (nrows x ncols). */
int plot_bars_png(const char *png_path, const char *title, const char *ylabel, const char *const *row_names,
                  int nrows, const char *const *col_names, int ncols, const double *values);
#endif
