/*
 * metrics_http: libmicrohttpd adapter (see metrics_http.h).
 */
#define _GNU_SOURCE
#include "io/metrics_http.h"

#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "detd/error.h"
#include "strfmt.h"

/* At most this many scrapers at once, each idle at most this long. */
#define METRICS_HTTP_MAX_CONNECTIONS 32
#define METRICS_HTTP_TIMEOUT_S 10

struct metrics_http {
    struct MHD_Daemon *mhd;
    metrics_http_render_cb render;
    metrics_http_serving_cb serving;
    void *ctx;
};

static enum MHD_Result reply_static(struct MHD_Connection *conn, unsigned code,
                                    const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    metrics_http *h = cls;
    (void)version;
    (void)upload;
    if (*con_cls == NULL) {
        /* First call for this request: headers only. */
        *con_cls = h;
        return MHD_YES;
    }
    if (*upload_size != 0) {
        *upload_size = 0; /* a body is ignored: GET only */
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply_static(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
                            "only GET is served\n");
    if (strcmp(url, "/healthz") == 0)
        return h->serving(h->ctx)
                   ? reply_static(conn, MHD_HTTP_OK, "ok\n")
                   : reply_static(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                                  "draining\n");
    if (strcmp(url, "/metrics") != 0)
        return reply_static(conn, MHD_HTTP_NOT_FOUND,
                            "not found: try /metrics or /healthz\n");
    char *text = NULL;
    size_t len = 0;
    if (h->render(h->ctx, &text, &len) != 0)
        return reply_static(conn, MHD_HTTP_SERVICE_UNAVAILABLE,
                            "metrics unavailable: the daemon did not answer "
                            "in time\n");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (r == NULL) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Split "HOST:PORT" / "[V6]:PORT" and resolve it. */
static int resolve(const char *hostport, struct addrinfo **ret, char **err) {
    char host[256];
    const char *port;
    if (hostport[0] == '[') {
        const char *close = strchr(hostport, ']');
        if (close == NULL || close[1] != ':' ||
            (size_t)(close - hostport - 1) >= sizeof(host)) {
            *err = strfmt("--metrics: '%s' is not [ADDRESS]:PORT", hostport);
            return DETD_EINVAL;
        }
        memcpy(host, hostport + 1, (size_t)(close - hostport - 1));
        host[close - hostport - 1] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(hostport, ':');
        if (colon == NULL || colon == hostport ||
            (size_t)(colon - hostport) >= sizeof(host)) {
            *err = strfmt("--metrics: '%s' is not HOST:PORT", hostport);
            return DETD_EINVAL;
        }
        memcpy(host, hostport, (size_t)(colon - hostport));
        host[colon - hostport] = '\0';
        port = colon + 1;
    }
    char *end = NULL;
    long p = strtol(port, &end, 10);
    if (end == port || *end != '\0' || p < 1 || p > 65535) {
        *err = strfmt("--metrics: '%s': port must be 1 to 65535", hostport);
        return DETD_EINVAL;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    int rc = getaddrinfo(host, port, &hints, ret);
    if (rc != 0) {
        *err = strfmt("--metrics: '%s': %s", hostport, gai_strerror(rc));
        return DETD_EINVAL;
    }
    return 0;
}

int metrics_http_start(const char *hostport, metrics_http_render_cb render,
                       metrics_http_serving_cb serving, void *ctx,
                       metrics_http **ret, char **ret_errmsg) {
    char *err = NULL;
    struct addrinfo *ai = NULL;
    int rc = 0;
    metrics_http *h = NULL;
    if (hostport == NULL || render == NULL || serving == NULL || ret == NULL)
        return DETD_EINVAL;
    rc = resolve(hostport, &ai, &err);
    if (rc != 0)
        goto out;
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        rc = DETD_ENOMEM;
        goto out;
    }
    h->render = render;
    h->serving = serving;
    h->ctx = ctx;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    /* One internal thread answers every scrape in turn: a render waits for
     * the loop (exporter.c), so scrapes never run concurrently. */
    h->mhd = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_HTTP_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_HTTP_TIMEOUT_S,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
        MHD_OPTION_END);
    if (h->mhd == NULL) {
        err = strfmt("--metrics: cannot listen on '%s'", hostport);
        rc = DETD_EUNAVAILABLE;
        goto out;
    }
    *ret = h;
    h = NULL;
out:
    free(h);
    if (ai != NULL)
        freeaddrinfo(ai);
    if (ret_errmsg != NULL)
        *ret_errmsg = err;
    else
        free(err);
    return rc;
}

void metrics_http_stop(metrics_http *h) {
    if (h == NULL)
        return;
    MHD_stop_daemon(h->mhd);
    free(h);
}
