/* svg.c — the small SVG plotting kt report draws with (report.h): a frame with linear, log or
 * categorical axes, nice ticks, lines, markers with hover tips (<title>, no scripts) and a
 * legend. Everything is written as text; every string from the database goes through
 * kt_html_escape. */
#include "report.h"

#include <math.h>
#include <string.h>

#define TITLE_H 34.0 /* title and legend rows above the frame */
#define RIGHT_PAD 16.0

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

const char *kt_plot_color(int i) { return palette[(i % 10 + 10) % 10]; }

void kt_html_escape(FILE *out, const char *s) {
    for (; s && *s; s++) switch (*s) {
            case '&':
                fputs("&amp;", out);
                break;
            case '<':
                fputs("&lt;", out);
                break;
            case '>':
                fputs("&gt;", out);
                break;
            case '"':
                fputs("&quot;", out);
                break;
            case '\'':
                fputs("&#39;", out);
                break;
            default:
                fputc(*s, out);
        }
}

void kt_plot_begin(kt_plot *p, FILE *out, const char *kind, const char *title, double w, double h, double left,
                   double bottom) {
    kt_axis x = p->x, y = p->y; /* the caller may have set the axes first */
    memset(p, 0, sizeof *p);
    p->x = x;
    p->y = y;
    p->out = out;
    p->w = w;
    p->h = h;
    p->left = left;
    p->right = w - RIGHT_PAD;
    p->top = TITLE_H + 12;
    p->bottom = h - bottom;
    fprintf(out,
            "<svg class=\"plot\" data-plot=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" "
            "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
            kind, w, h, w, h);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n<text x=\"8\" y=\"16\" "
                 "font-size=\"13\" font-weight=\"bold\">");
    kt_html_escape(out, title);
    fprintf(out, "</text>\n");
}

void kt_axis_include(kt_axis *a, double v) {
    if (!isfinite(v) || (a->log && v <= 0)) return;
    if (!a->set) a->lo = a->hi = v, a->set = 1;
    if (v < a->lo) a->lo = v;
    if (v > a->hi) a->hi = v;
}

void kt_axis_pad(kt_axis *a) {
    if (a->names) {
        a->lo = -0.5;
        a->hi = a->n_names - 0.5;
        return;
    }
    if (!a->set) a->lo = a->log, a->hi = 10; /* nothing to show: an empty frame */
    if (a->log) {                            /* at least a decade, so ticks and slopes read */
        double widen = a->hi / a->lo < 8 ? sqrt(8 / (a->hi / a->lo)) : 1.25;
        a->lo /= widen;
        a->hi *= widen;
        return;
    }
    double span = a->hi - a->lo;
    if (span <= 0) span = a->hi ? fabs(a->hi) : 1;
    if (a->lo >= 0 && a->lo < span)
        a->lo = 0; /* a linear axis of sizes starts at 0 */
    else
        a->lo -= 0.05 * span;
    a->hi += 0.08 * span;
}

static double frac(const kt_axis *a, double v) {
    if (a->log) return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    return (v - a->lo) / (a->hi - a->lo);
}

double kt_plot_px(const kt_plot *p, double x) { return p->left + frac(&p->x, x) * (p->right - p->left); }
double kt_plot_py(const kt_plot *p, double y) {
    if (p->y.names) return p->top + (y + 0.5) / p->y.n_names * (p->bottom - p->top); /* rows, top down */
    return p->bottom - frac(&p->y, y) * (p->bottom - p->top);
}

/* Tick values of a: decades with 2 and 5 between on log axes (decades alone when wide),
 * 1-2-5 steps on linear ones; returns how many (max 64). */
static int ticks(const kt_axis *a, double *t) {
    int n = 0;
    if (a->names) {
        for (int i = 0; i < a->n_names && n < 64; i++) t[n++] = i;
        return n;
    }
    if (a->log) {
        int wide = log10(a->hi / a->lo) > 4;
        for (double d = pow(10, floor(log10(a->lo))); d <= a->hi && n < 60; d *= 10) {
            static const double sub[] = {1, 2, 5};
            for (int i = 0; i < (wide ? 1 : 3); i++)
                if (d * sub[i] >= a->lo && d * sub[i] <= a->hi) t[n++] = d * sub[i];
        }
        return n;
    }
    double raw = (a->hi - a->lo) / 6, mag = pow(10, floor(log10(raw))), step = mag;
    if (raw / mag > 5)
        step = 10 * mag;
    else if (raw / mag > 2)
        step = 5 * mag;
    else if (raw / mag > 1)
        step = 2 * mag;
    for (double v = ceil(a->lo / step) * step; v <= a->hi + 1e-9 * step && n < 64; v += step) t[n++] = v;
    return n;
}

static void number(char *out, size_t n, double v) {
    if (v != 0 && (fabs(v) >= 1e5 || fabs(v) < 1e-3))
        snprintf(out, n, "%.0e", v);
    else
        snprintf(out, n, "%.4g", v);
}

void kt_plot_axes(kt_plot *p) {
    FILE *o = p->out;
    double t[64];
    char s[32];
    fprintf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fafafa\" stroke=\"#999\"/>\n",
            p->left, p->top, p->right - p->left, p->bottom - p->top);
    int n = ticks(&p->x, t);
    for (int i = 0; i < n; i++) {
        double x = kt_plot_px(p, t[i]);
        fprintf(o, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n", x, p->top, x,
                p->bottom);
        if (p->x.names) {
            fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" transform=\"rotate(-35 %.1f %.1f)\">", x,
                    p->bottom + 12, x, p->bottom + 12);
            kt_html_escape(o, p->x.names[i]);
            fprintf(o, "</text>\n");
        } else {
            number(s, sizeof s, t[i]);
            fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", x, p->bottom + 14, s);
        }
    }
    for (int i = 0; p->y.names && i < p->y.n_names; i++) {
        fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-family=\"monospace\" font-size=\"10\">",
                p->left - 4, kt_plot_py(p, i) + 3.5);
        kt_html_escape(o, p->y.names[i]);
        fprintf(o, "</text>\n");
    }
    n = p->y.names ? 0 : ticks(&p->y, t);
    for (int i = 0; i < n; i++) {
        double y = kt_plot_py(p, t[i]);
        number(s, sizeof s, t[i]);
        fprintf(o,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e3e3\"/>\n<text x=\"%.1f\" "
                "y=\"%.1f\" text-anchor=\"end\">%s</text>\n",
                p->left, y, p->right, y, p->left - 4, y + 4, s);
    }
    if (p->x.label && !p->x.names) {
        fprintf(o, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", (p->left + p->right) / 2, p->bottom + 30);
        kt_html_escape(o, p->x.label);
        fprintf(o, "</text>\n");
    }
    if (p->y.label) {
        double cy = (p->top + p->bottom) / 2;
        fprintf(o, "<text x=\"14\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 14 %.1f)\">", cy, cy);
        kt_html_escape(o, p->y.label);
        fprintf(o, "</text>\n");
    }
}

static int visible(const kt_plot *p, double x, double y) {
    return isfinite(x) && isfinite(y) && (!p->x.log || x > 0) && (!p->y.log || y > 0);
}

void kt_plot_line(kt_plot *p, const double *x, const double *y, int n, const char *color, int dashed, const char *tip) {
    fprintf(p->out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\"%s points=\"", color,
            dashed ? " stroke-dasharray=\"5 3\"" : "");
    for (int i = 0; i < n; i++)
        if (visible(p, x[i], y[i])) fprintf(p->out, "%.1f,%.1f ", kt_plot_px(p, x[i]), kt_plot_py(p, y[i]));
    fprintf(p->out, "\">");
    if (tip) {
        fprintf(p->out, "<title>");
        kt_html_escape(p->out, tip);
        fprintf(p->out, "</title>");
    }
    fprintf(p->out, "</polyline>\n");
}

/* The marker shape's SVG at pixel (x, y). */
static void shape_at(FILE *o, int shape, double x, double y, const char *color) {
    switch (shape) {
        case KT_SQUARE:
            fprintf(o, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"%s\"", x - 4, y - 4, color);
            break;
        case KT_TRIANGLE:
            fprintf(o, "<path d=\"M%.1f %.1fl5 9h-10z\" fill=\"%s\"", x, y - 5, color);
            break;
        case KT_DIAMOND:
            fprintf(o, "<path d=\"M%.1f %.1fl5 5l-5 5l-5 -5z\" fill=\"%s\"", x, y - 5, color);
            break;
        case KT_CROSS:
            fprintf(o, "<path d=\"M%.1f %.1fl8 8m0 -8l-8 8\" stroke=\"%s\" stroke-width=\"2\"", x - 4, y - 4, color);
            break;
        case KT_BAR:
            fprintf(o, "<path d=\"M%.1f %.1fh16\" stroke=\"%s\" stroke-width=\"2.5\"", x - 8, y, color);
            break;
        default:
            fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"", x, y, color);
    }
}

void kt_plot_marker(kt_plot *p, double x, double y, int shape, const char *color, const char *tip) {
    if (!visible(p, x, y)) return;
    shape_at(p->out, shape, kt_plot_px(p, x), kt_plot_py(p, y), color);
    fprintf(p->out, ">");
    if (tip) {
        fprintf(p->out, "<title>");
        kt_html_escape(p->out, tip);
        fprintf(p->out, "</title>");
    }
    fprintf(p->out, "</%s>\n", shape == KT_SQUARE ? "rect" : shape == KT_DOT ? "circle" : "path");
}

void kt_plot_legend(kt_plot *p, const char *const *names, const char *const *colors, const int *shapes, int n) {
    double x = 8;
    for (int i = 0; i < n; i++) {
        shape_at(p->out, shapes[i], x + 5, 31, colors[i]);
        fprintf(p->out, "/>\n<text x=\"%.1f\" y=\"35\">", x + 14);
        kt_html_escape(p->out, names[i]);
        fprintf(p->out, "</text>\n");
        x += 26 + 6.2 * (double)strlen(names[i]);
    }
}

void kt_plot_end(kt_plot *p) { fprintf(p->out, "</svg>\n"); }
