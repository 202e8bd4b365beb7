/*
 * Unit tests of the Prometheus text rendering (daemon/core/metrics.c).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"
#include "core/metrics.h"
#include "runner.h"

static char *render_take(struct metrics_buf *b) {
    char *t = NULL;
    size_t n = 0;
    CHECK_EQ_INT(metrics_buf_take(b, &t, &n), 0);
    CHECK_EQ_INT(strlen(t), n);
    return t;
}

TEST(family_and_plain_samples) {
    struct metrics_buf b;
    metrics_buf_init(&b);
    metrics_family(&b, "detd_x_total", "counter", "line one\nback\\slash");
    metrics_sample(&b, "detd_x_total", NULL, 42);
    const char *l[] = {"source", "timed", NULL};
    metrics_sample(&b, "detd_x_total", l, 7);
    char *t = render_take(&b);
    CHECK_STR(t, "# HELP detd_x_total line one\\nback\\\\slash\n"
                 "# TYPE detd_x_total counter\n"
                 "detd_x_total 42\n"
                 "detd_x_total{source=\"timed\"} 7\n");
    free(t);
}

TEST(label_values_are_escaped) {
    struct metrics_buf b;
    metrics_buf_init(&b);
    const char *l[] = {"endpoint", "a\"b\\c\nd", "k2", "", NULL};
    metrics_sample(&b, "m", l, 1);
    char *t = render_take(&b);
    CHECK_STR(t, "m{endpoint=\"a\\\"b\\\\c\\nd\",k2=\"\"} 1\n");
    free(t);
}

TEST(values) {
    struct metrics_buf b;
    metrics_buf_init(&b);
    metrics_sample(&b, "a", NULL, 0.25);
    metrics_sample(&b, "b", NULL, INFINITY);
    metrics_sample(&b, "c", NULL, -INFINITY);
    metrics_sample(&b, "d", NULL, NAN);
    metrics_sample(&b, "e", NULL, 1764460800.5);
    metrics_sample(&b, "f", NULL, 18446744073709551615.0);
    char *t = render_take(&b);
    CHECK_STR(t, "a 0.25\nb +Inf\nc -Inf\nd NaN\ne 1764460800.5\n"
                 "f 1.8446744073709552e+19\n");
    free(t);
}

TEST(histogram_buckets_are_cumulative) {
    struct metrics_hist h;
    memset(&h, 0, sizeof(h));
    metrics_hist_observe(&h, 0.00005); /* first bucket */
    metrics_hist_observe(&h, 0.0001);  /* le is inclusive: first bucket */
    metrics_hist_observe(&h, 0.003);   /* le 0.005 */
    metrics_hist_observe(&h, 2.0);     /* le 2.5 */
    metrics_hist_observe(&h, 5000);    /* over the largest bound */
    metrics_hist_observe(&h, -1);      /* clamped to 0 */
    CHECK_EQ_INT(h.count, 6);
    struct metrics_buf b;
    metrics_buf_init(&b);
    const char *l[] = {"method", "Decide", NULL};
    metrics_histogram(&b, "detd_request_duration_seconds", l, &h);
    char *t = render_take(&b);
    CHECK(strstr(t, "detd_request_duration_seconds_bucket{method=\"Decide\","
                    "le=\"0.0001\"} 3\n") != NULL);
    CHECK(strstr(t, "{method=\"Decide\",le=\"0.0025\"} 3\n") != NULL);
    CHECK(strstr(t, "{method=\"Decide\",le=\"0.005\"} 4\n") != NULL);
    CHECK(strstr(t, "{method=\"Decide\",le=\"1\"} 4\n") != NULL);
    CHECK(strstr(t, "{method=\"Decide\",le=\"2.5\"} 5\n") != NULL);
    CHECK(strstr(t, "{method=\"Decide\",le=\"600\"} 5\n") != NULL);
    CHECK(strstr(t, "{method=\"Decide\",le=\"+Inf\"} 6\n") != NULL);
    CHECK(strstr(t, "detd_request_duration_seconds_count{method=\"Decide\"} "
                    "6\n") != NULL);
    CHECK(strstr(t, "detd_request_duration_seconds_sum{method=\"Decide\"} "
                    "5002.00315") != NULL);
    /* Every bucket line, in order, never decreasing. */
    unsigned long long prev = 0;
    int lines = 0;
    for (char *p = strstr(t, "_bucket{"); p != NULL;
         p = strstr(p + 1, "_bucket{")) {
        char *sp = strchr(p, ' ');
        unsigned long long v = strtoull(sp + 1, NULL, 10);
        CHECK(v >= prev);
        prev = v;
        lines++;
    }
    CHECK_EQ_INT(lines, METRICS_NBUCKETS + 1);
    free(t);
}

TEST(histogram_add) {
    struct metrics_hist a, c;
    memset(&a, 0, sizeof(a));
    memset(&c, 0, sizeof(c));
    metrics_hist_observe(&a, 0.01);
    metrics_hist_observe(&c, 0.01);
    metrics_hist_observe(&c, 100);
    metrics_hist_add(&a, &c);
    CHECK_EQ_INT(a.count, 3);
    CHECK_EQ_INT(a.buckets[6], 2);
    CHECK_EQ_INT(a.buckets[METRICS_NBUCKETS - 1], 1);
}

TEST(empty_buffer_takes_empty_text) {
    struct metrics_buf b;
    metrics_buf_init(&b);
    char *t = render_take(&b);
    CHECK_STR(t, "");
    free(t);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
