/*
 * metrics: Prometheus text rendering (see metrics.h).
 */
#include "core/metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

const double metrics_bucket_bounds[METRICS_NBUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   60,    600,
};

void metrics_hist_observe(struct metrics_hist *h, double seconds) {
    if (!(seconds >= 0)) /* negative or NaN */
        seconds = 0;
    size_t i = 0;
    while (i < METRICS_NBUCKETS && seconds > metrics_bucket_bounds[i])
        i++;
    h->buckets[i]++;
    h->count++;
    h->sum += seconds;
}

void metrics_hist_add(struct metrics_hist *dst,
                      const struct metrics_hist *src) {
    for (size_t i = 0; i <= METRICS_NBUCKETS; i++)
        dst->buckets[i] += src->buckets[i];
    dst->count += src->count;
    dst->sum += src->sum;
}

void metrics_buf_init(struct metrics_buf *b) {
    memset(b, 0, sizeof(*b));
}

void metrics_buf_free(struct metrics_buf *b) {
    free(b->data);
    metrics_buf_init(b);
}

int metrics_buf_take(struct metrics_buf *b, char **ret_text, size_t *ret_len) {
    if (b->failed) {
        metrics_buf_free(b);
        return DETD_ENOMEM;
    }
    if (b->data == NULL && (b->data = calloc(1, 1)) == NULL)
        return DETD_ENOMEM;
    *ret_text = b->data;
    *ret_len = b->len;
    metrics_buf_init(b);
    return 0;
}

static void put(struct metrics_buf *b, const char *s, size_t n) {
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (p == NULL) {
            b->failed = 1;
            return;
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

static void puts_(struct metrics_buf *b, const char *s) {
    put(b, s, strlen(s));
}

/* Escape for HELP text (quote no) or label values (quote yes). */
static void put_escaped(struct metrics_buf *b, const char *s, int quote) {
    for (; *s != '\0'; s++) {
        if (*s == '\\')
            puts_(b, "\\\\");
        else if (*s == '\n')
            puts_(b, "\\n");
        else if (quote && *s == '"')
            puts_(b, "\\\"");
        else
            put(b, s, 1);
    }
}

static void put_value(struct metrics_buf *b, double v) {
    char num[64];
    if (isnan(v))
        snprintf(num, sizeof(num), "NaN");
    else if (isinf(v))
        snprintf(num, sizeof(num), v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 9007199254740992.0)
        snprintf(num, sizeof(num), "%.0f", v);
    else {
        /* The shortest form that reads back as the same double. */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(num, sizeof(num), "%.*g", prec, v);
            if (strtod(num, NULL) == v)
                break;
        }
    }
    puts_(b, num);
}

void metrics_family(struct metrics_buf *b, const char *name, const char *type,
                    const char *help) {
    puts_(b, "# HELP ");
    puts_(b, name);
    puts_(b, " ");
    put_escaped(b, help, 0);
    puts_(b, "\n# TYPE ");
    puts_(b, name);
    puts_(b, " ");
    puts_(b, type);
    puts_(b, "\n");
}

/* name{labels[,extra_k="extra_v"]} */
static void put_series(struct metrics_buf *b, const char *name,
                       const char *suffix, const char *const *labels,
                       const char *extra_k, const char *extra_v) {
    puts_(b, name);
    puts_(b, suffix);
    int n = 0;
    for (size_t i = 0; labels != NULL && labels[i] != NULL; i += 2) {
        puts_(b, n++ ? "," : "{");
        puts_(b, labels[i]);
        puts_(b, "=\"");
        put_escaped(b, labels[i + 1] != NULL ? labels[i + 1] : "", 1);
        puts_(b, "\"");
    }
    if (extra_k != NULL) {
        puts_(b, n++ ? "," : "{");
        puts_(b, extra_k);
        puts_(b, "=\"");
        put_escaped(b, extra_v, 1);
        puts_(b, "\"");
    }
    if (n > 0)
        puts_(b, "}");
    puts_(b, " ");
}

void metrics_sample(struct metrics_buf *b, const char *name,
                    const char *const *labels, double value) {
    put_series(b, name, "", labels, NULL, NULL);
    put_value(b, value);
    puts_(b, "\n");
}

void metrics_histogram(struct metrics_buf *b, const char *name,
                       const char *const *labels,
                       const struct metrics_hist *h) {
    uint64_t cum = 0;
    char le[32];
    for (size_t i = 0; i < METRICS_NBUCKETS; i++) {
        cum += h->buckets[i];
        snprintf(le, sizeof(le), "%g", metrics_bucket_bounds[i]);
        put_series(b, name, "_bucket", labels, "le", le);
        put_value(b, (double)cum);
        puts_(b, "\n");
    }
    put_series(b, name, "_bucket", labels, "le", "+Inf");
    put_value(b, (double)h->count);
    puts_(b, "\n");
    put_series(b, name, "_sum", labels, NULL, NULL);
    put_value(b, h->sum);
    puts_(b, "\n");
    put_series(b, name, "_count", labels, NULL, NULL);
    put_value(b, (double)h->count);
    puts_(b, "\n");
}
