/*
 * detctl_call: one Admin call as detctl makes it (a failure is printed
 * once, naming the daemon, and turned into an exit status), the namespace
 * a command acts on, and kernel patterns resolved against what the daemon
 * stores.
 */
#ifndef DETD_DETCTL_CALL_H
#define DETD_DETCTL_CALL_H

#include <stddef.h>

#include "detctl_cli.h"
#include "detd.pb-c.h"

struct wire_channel;

/* The exit status of a failed call (rc < 0), the message printed to
 * stderr naming what and the daemon. */
int detctl_call_fail(const struct detctl_opts *o, const char *what, int rc);

/*
 * One unary Admin call (method: a WIRE_METHOD_* path). Returns 0 with
 * *ret the answer (protobuf_c_message_free_unpacked), or the exit status
 * after printing the failure.
 */
int detctl_call(const struct detctl_opts *o, struct wire_channel *ch,
                const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **ret);

/*
 * The namespace the command acts on, into buf: o->namespace_ when set
 * (--namespace or DETD_NAMESPACE), else the daemon's (asked with Status;
 * "" when that call fails). *ret_src (may be NULL) gets where it came from:
 * "--namespace", "DETD_NAMESPACE" or "daemon".
 */
void detctl_call_namespace(const struct detctl_opts *o, struct wire_channel *ch,
                           char *buf, size_t len, const char **ret_src);

/* Print "namespace: NS (SRC)" to stdout. */
void detctl_call_print_namespace(const char *ns, const char *src);

/*
 * Every observation of namespace ns, page by page, into *ret_pages (the
 * answers: free each with protobuf_c_message_free_unpacked(), then the
 * array) and *ret_n pages; *ret_capped is set when a daemon without
 * paging cut its list at its cap. Returns 0 or an exit status after
 * printing the failure (the pages read so far are still returned).
 */
int detctl_call_observations(const struct detctl_opts *o,
                             struct wire_channel *ch, const char *ns,
                             Detd__V1__ListObservationsResponse ***ret_pages,
                             size_t *ret_n, int *ret_capped);

/* The decisions of namespace ns ("" or NULL: the daemon's), of one exact
 * kernel id (NULL: all), every page of ListDecisions (each at most 512
 * KiB) merged into one answer ordered by kernel, key and arch
 * ((*ret)->truncated: a daemon that does not page stopped at its cap).
 * Returns 0 with *ret the answer, or the exit status after printing the
 * failure. */
int detctl_call_decisions(const struct detctl_opts *o, struct wire_channel *ch,
                          const char *ns, const char *kernel,
                          Detd__V1__ListDecisionsResponse **ret);

/* Where detctl_call_kernels() looks beside the decisions (flags). */
#define DETCTL_KERNELS_VOTES 1    /* the record-mode votes */
#define DETCTL_KERNELS_OBSERVED 2 /* the observations */

/*
 * The distinct kernel ids of namespace ns (NULL: the daemon's) that match
 * pattern (detctl_key.h), from the decisions and what the flags in from
 * add (DETCTL_KERNELS_*).
 * Returns 0 with *ret_ids a heap array of heap strings (free each, then
 * the array; NULL when none) and *ret_n their count, or an exit status
 * after printing the failure.
 */
int detctl_call_kernels(const struct detctl_opts *o, struct wire_channel *ch,
                        const char *ns, const char *pattern, int from,
                        char ***ret_ids, size_t *ret_n);

/* Free what detctl_call_kernels returned. */
void detctl_call_kernels_free(char **ids, size_t n);

#endif /* DETD_DETCTL_CALL_H */
