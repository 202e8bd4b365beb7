/*
 * metrics_http (daemon/io/metrics_http.c) on a real loopback socket:
 * /healthz answers 200 "ok" while the serving callback says so and 503
 * "draining" once it does not (the daemon's drain flips it); /metrics
 * serves the rendered text, or 503 when rendering fails.
 */
#define _GNU_SOURCE
#include "io/metrics_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "detd/error.h"
#include "runner.h"

static atomic_int serving_flag = 1;

static int serving(void *ctx) {
    (void)ctx;
    return atomic_load(&serving_flag);
}

static int render(void *ctx, char **ret_text, size_t *ret_len) {
    int *fail = ctx;
    if (*fail)
        return DETD_ETIMEDOUT;
    *ret_text = strdup("detd_up 1\n");
    *ret_len = strlen(*ret_text);
    return 0;
}

/* A port free a moment ago. */
static int free_port(void) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    CHECK(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    CHECK(getsockname(s, (struct sockaddr *)&a, &n) == 0);
    close(s);
    return ntohs(a.sin_port);
}

/* GET path over a new connection; the whole answer, NUL-terminated. */
static char *get(int port, const char *path) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(connect(s, (struct sockaddr *)&a, sizeof(a)) == 0);
    char req[256];
    int n = snprintf(req, sizeof(req),
                     "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                     path);
    CHECK(write(s, req, (size_t)n) == n);
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(s, buf + len, cap - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = '\0';
    close(s);
    return buf;
}

static metrics_http *start(int *fail, int *ret_port) {
    metrics_http *h = NULL;
    for (int i = 0; i < 20 && h == NULL; i++) {
        int port = free_port();
        char addr[64], *err = NULL;
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        if (metrics_http_start(addr, render, serving, fail, &h, &err) == 0)
            *ret_port = port;
        free(err);
    }
    CHECK(h != NULL);
    return h;
}

/* GET path answers with status (e.g. "200") and, if body is not NULL,
 * exactly that body. */
static void expect(int port, const char *path, const char *status,
                   const char *body) {
    char *r = get(port, path);
    char line[32];
    snprintf(line, sizeof(line), "HTTP/1.1 %s", status);
    CHECK(strncmp(r, line, strlen(line)) == 0);
    if (body != NULL) {
        const char *b = strstr(r, "\r\n\r\n");
        CHECK(b != NULL);
        CHECK_STR(b + 4, body);
    }
    free(r);
}

TEST(healthz_follows_the_serving_flag) {
    int fail = 0, port = 0;
    atomic_store(&serving_flag, 1);
    metrics_http *h = start(&fail, &port);
    expect(port, "/healthz", "200", "ok\n");
    atomic_store(&serving_flag, 0); /* the drain began */
    expect(port, "/healthz", "503", "draining\n");
    metrics_http_stop(h);
}

TEST(metrics_text_or_503) {
    int fail = 0, port = 0;
    atomic_store(&serving_flag, 1);
    metrics_http *h = start(&fail, &port);
    expect(port, "/metrics", "200", "detd_up 1\n");
    fail = 1;
    expect(port, "/metrics", "503", NULL);
    expect(port, "/nothing", "404", NULL);
    metrics_http_stop(h);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
