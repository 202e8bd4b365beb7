/*
 * detctl_print: how detctl shows things: aligned text tables, humanized
 * durations, and JSON forms of the admin API's messages.
 */
#ifndef DETD_DETCTL_PRINT_H
#define DETD_DETCTL_PRINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "detd.pb-c.h"

struct detctl_print_table;

/*
 * A table with ncols columns named by headers (borrowed, static).
 * Returns NULL when out of memory.
 */
struct detctl_print_table *detctl_print_table_new(size_t ncols,
                                                  const char *const *headers);

/* Append a row of ncols cells (copied and escaped with
 * detctl_print_escape(); NULL prints as "-"). Returns 0 or -ENOMEM. */
int detctl_print_table_add(struct detctl_print_table *t,
                           const char *const *cells);

/* Print with column widths computed from the content, two spaces apart,
 * indented by indent spaces. */
void detctl_print_table_write(const struct detctl_print_table *t, FILE *out,
                              int indent);

/* Free the table. NULL: no-op. */
void detctl_print_table_free(struct detctl_print_table *t);

/* A duration for humans: "850ms", "42s", "4m12s", "3h05m", "2d04h". */
void detctl_print_duration(int64_t ms, char *buf, size_t len);

/* A unix time in milliseconds as "2026-11-29T21:35:14Z" (UTC), or
 * "-" for 0. */
void detctl_print_time(int64_t unix_ms, char *buf, size_t len);

/* "rank 3 host1 pid 4242" style label of a client identity. */
/* One client of a verify use, as claimed, with the pid, uid and node the
 * daemon saw beside it (when the daemon sent them): written to buf. */
void detctl_print_use_client(const Detd__V1__VerifyUse *u, size_t k, char *buf,
                             size_t len);

/* "rank R host pid P" of c, and when p is set what the daemon saw of the
 * caller: "(seen: pid P uid U on NODE)", with " claimed pid differs" when
 * the pid c claims is not the peer's. */
void detctl_print_who_seen(const Detd__V1__ClientIdentity *c,
                           const Detd__V1__PeerIdentity *p, char *buf,
                           size_t len);

void detctl_print_who(const Detd__V1__ClientIdentity *id, char *buf,
                      size_t len);

/* The name of a source ("timed", "table", ...). Static string. */
const char *detctl_print_source(Detd__V1__Source s);

/* JSON forms. Each returns a new reference, or NULL when out of memory. */
json_t *detctl_print_json_identity(const Detd__V1__ClientIdentity *id);
/* {pid, uid, node, claimed_pid}: who the daemon saw; null when p is NULL. */
json_t *detctl_print_json_peer(const Detd__V1__PeerIdentity *p);
json_t *detctl_print_json_decision(const Detd__V1__Decision *d);
json_t *detctl_print_json_status(const Detd__V1__StatusResponse *s);
json_t *detctl_print_json_verify(const Detd__V1__VerifyResponse *v);

/*
 * s made safe to print on a terminal: control characters (C0, DEL, the C1
 * range and the Unicode line and paragraph separators) as \n, \r, \t,
 * \xNN or \uNNNN, and the backslash as \\, so that text a client sent
 * can neither start a line of its own nor move the cursor. Returns a new
 * string to free(), or NULL when out of memory. s must be valid UTF-8 or
 * any bytes (bytes are kept as they are, but for those above).
 */
char *detctl_print_escape(const char *s);

/*
 * A deep copy of doc in which every string value is escaped
 * (detctl_print_escape()): for text output of documents that carry what
 * clients sent. Object keys are left alone. A new reference, or NULL when
 * out of memory.
 */
json_t *detctl_print_json_escaped(const json_t *doc);

#endif /* DETD_DETCTL_PRINT_H */
