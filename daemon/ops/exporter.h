/*
 * exporter: the daemon's metrics, served by metrics_http.c.
 *
 * The HTTP thread must not read loop state, so each scrape asks the loop
 * for the text: it posts a request (uv_async_send), the loop renders the
 * whole exposition from its own state on its thread and hands the buffer
 * back through a mutex and a condition variable; the HTTP thread waits at
 * most EXPORTER_WAIT_MS and answers 503 past that. Rendering per scrape
 * (rather than refreshing a snapshot every second) costs the loop nothing
 * between scrapes and makes every scrape current, so a counter read after
 * a call has returned includes that call.
 */
#ifndef DETD_EXPORTER_H
#define DETD_EXPORTER_H

#include <stddef.h>

struct daemon;
typedef struct exporter exporter;

#define EXPORTER_WAIT_MS 2000

/*
 * Start serving d's metrics on addr ("HOST:PORT") (loop thread, once the
 * loop handles exist). Returns 0 or a negative DETD_E* with *ret_errmsg
 * (heap, caller frees). Freed by exporter_close().
 */
int exporter_open(struct daemon *d, const char *addr, exporter **ret,
                  char **ret_errmsg);

/*
 * Render d's metrics into *ret_text (heap, caller frees) and *ret_len
 * (loop thread). Returns 0 or DETD_ENOMEM.
 */
int exporter_render(struct daemon *d, char **ret_text, size_t *ret_len);

/* Stop the HTTP thread, then close the loop handle; the memory goes in
 * its close callback (run the loop after). NULL: no-op. */
void exporter_close(exporter *e);

#endif /* DETD_EXPORTER_H */
