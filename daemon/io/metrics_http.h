/*
 * metrics_http: the HTTP endpoint for Prometheus (GET /metrics) and plain
 * probes (GET /healthz). The only module that calls libmicrohttpd (MHD_*).
 * libmicrohttpd answers on its own thread: the callbacks below run there
 * and must not touch loop state (exporter.c hands them a snapshot).
 */
#ifndef DETD_METRICS_HTTP_H
#define DETD_METRICS_HTTP_H

#include <stddef.h>

typedef struct metrics_http metrics_http;

/*
 * The text of GET /metrics (HTTP thread). Returns 0 with *ret_text (heap,
 * taken by the caller: freed here after sending) and *ret_len, or a
 * negative DETD_E* for 503 (*ret_text untouched).
 */
typedef int (*metrics_http_render_cb)(void *ctx, char **ret_text,
                                      size_t *ret_len);

/* Is the daemon serving (200) or draining (503)? HTTP thread. */
typedef int (*metrics_http_serving_cb)(void *ctx);

/*
 * Listen on "HOST:PORT" (a numeric IPv4/IPv6 address, [v6]:port, or a
 * host name resolved once) and serve until metrics_http_stop(). Returns 0
 * or a negative DETD_E*, *ret_errmsg (heap, caller frees) naming the
 * address and the problem.
 */
int metrics_http_start(const char *hostport, metrics_http_render_cb render,
                       metrics_http_serving_cb serving, void *ctx,
                       metrics_http **ret, char **ret_errmsg);

/* Stop serving (waits for the HTTP thread) and free. NULL: no-op. */
void metrics_http_stop(metrics_http *h);

#endif /* DETD_METRICS_HTTP_H */
