/* report.h — `kt report`: a winners database (and optionally `kt bench --json` files) as one
 * self-contained HTML page of SVG plots (no scripts, no network): per problem every measured
 * variant, per family the winners against floor, roof and baselines, a roofline, the winner's
 * time over the batch buckets, and the provenance of every run. It reads the DB's text
 * columns only, so a family this build does not know still gets its plots (without floor
 * and roof, which need the family's bytes() and flops()). */
#ifndef KT_REPORT_H
#define KT_REPORT_H
#include "kt.h"

typedef struct kt_report_options {
    const char *db_path;
    const char *out_dir;           /* index.html is written there */
    const char *const *bench_json; /* `kt bench --json` files: floors, roofs, baselines */
    int n_bench_json;
    const char *cmdline; /* this command, for the page's footer */
} kt_report_options;

/* Writes out_dir/index.html; *n_plots (may be NULL) gets how many SVG plots it holds. */
int kt_report_write(const kt_report_options *o, int *n_plots);

/* Writes s to out with &, <, >, " and ' as character references (text and attribute values). */
void kt_html_escape(FILE *out, const char *s);

/* ------------------------------------------------------------- SVG plots (svg.c) */

typedef struct kt_axis {
    double lo, hi; /* data range (log axes: > 0) */
    int log;       /* log10 scale */
    const char *label;
    const char *const *names; /* categorical: tick i is names[i] at value i (lo -0.5, hi n-0.5) */
    int n_names;
    int set; /* a value has been included */
} kt_axis;

typedef struct kt_plot {
    FILE *out;
    double w, h, left, right, top, bottom; /* the frame inside the margins */
    kt_axis x, y;
} kt_plot;

/* The marker shapes and the palette plots share. */
enum { KT_DOT, KT_SQUARE, KT_TRIANGLE, KT_DIAMOND, KT_CROSS, KT_BAR };
const char *kt_plot_color(int i);

/* Opens <svg class="plot" data-plot=kind> of w x h pixels with its title; the frame leaves
 * `left` pixels for y labels and `bottom` for x labels. */
void kt_plot_begin(kt_plot *p, FILE *out, const char *kind, const char *title, double w, double h, double left,
                   double bottom);
/* Widens [*lo, *hi] to include v (finite and, for log axes, positive values only). */
void kt_axis_include(kt_axis *a, double v);
/* Pads the range a little (log axes by a factor) so marks do not sit on the frame. */
void kt_axis_pad(kt_axis *a);
/* Draws the frame, grid, ticks and axis labels. */
void kt_plot_axes(kt_plot *p);
/* Pixel position of a data value. */
double kt_plot_px(const kt_plot *p, double x);
double kt_plot_py(const kt_plot *p, double y);
/* A line through (x[i], y[i]) skipping non-finite points; dashed when asked; tip on hover. */
void kt_plot_line(kt_plot *p, const double *x, const double *y, int n, const char *color, int dashed, const char *tip);
/* One marker at data (x, y) with a hover tip. */
void kt_plot_marker(kt_plot *p, double x, double y, int shape, const char *color, const char *tip);
/* A legend row under the title: names with their marker and color. */
void kt_plot_legend(kt_plot *p, const char *const *names, const char *const *colors, const int *shapes, int n);
/* Closes the svg. */
void kt_plot_end(kt_plot *p);

#endif
