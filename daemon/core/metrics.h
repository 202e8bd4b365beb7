/*
 * metrics: the Prometheus text exposition format (version 0.0.4), and
 * the histogram type the daemon records latencies in. Pure: it formats
 * into a memory buffer and touches no socket, clock or lock; the caller
 * collects the values (exporter.c) and serves the text (metrics_http.c).
 */
#ifndef DETD_METRICS_H
#define DETD_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* Upper bounds (seconds) of the histogram buckets, then +Inf. From 100 us
 * (a Decide on a decided key) to 10 minutes (a wait for a long timing
 * pass). */
#define METRICS_NBUCKETS 18
extern const double metrics_bucket_bounds[METRICS_NBUCKETS];

/* Per-bucket counts (not cumulative; index METRICS_NBUCKETS: over the
 * largest bound), the count and the sum of the observed values. */
struct metrics_hist {
    uint64_t buckets[METRICS_NBUCKETS + 1];
    uint64_t count;
    double sum;
};

/* Record one value (seconds; negative values count as 0). */
void metrics_hist_observe(struct metrics_hist *h, double seconds);

/* Add src into dst (merging copies taken under different locks). */
void metrics_hist_add(struct metrics_hist *dst, const struct metrics_hist *src);

/*
 * A growing text buffer. Errors are sticky: after an allocation failure
 * every write is ignored and metrics_buf_take() returns DETD_ENOMEM, so
 * renderers need not check each line.
 */
struct metrics_buf {
    char *data;
    size_t len, cap;
    int failed;
};

/* Start empty; nothing is allocated until the first write. */
void metrics_buf_init(struct metrics_buf *b);

/* Free the text (if not taken); the buffer is empty afterwards. */
void metrics_buf_free(struct metrics_buf *b);

/*
 * Hand the text over: *ret_text (NUL-terminated, heap, caller frees) and
 * *ret_len. Returns 0 or DETD_ENOMEM (the text is then freed). The
 * buffer is empty afterwards.
 */
int metrics_buf_take(struct metrics_buf *b, char **ret_text, size_t *ret_len);

/*
 * The HELP and TYPE lines of a metric family. type: "counter", "gauge"
 * or "histogram". help is escaped (backslash, newline).
 */
void metrics_family(struct metrics_buf *b, const char *name, const char *type,
                    const char *help);

/*
 * One sample line: name{k="v",...} value. labels: name/value pairs,
 * NULL-terminated (labels NULL or {NULL}: no braces). Label values are
 * escaped (backslash, double quote, newline). Integral values print
 * without a fraction; infinities as +Inf/-Inf, NaN as NaN.
 */
void metrics_sample(struct metrics_buf *b, const char *name,
                    const char *const *labels, double value);

/*
 * A histogram's samples: name_bucket{labels...,le="..."} (cumulative,
 * ending with le="+Inf" equal to the count), name_sum and name_count.
 */
void metrics_histogram(struct metrics_buf *b, const char *name,
                       const char *const *labels, const struct metrics_hist *h);

#endif /* DETD_METRICS_H */
