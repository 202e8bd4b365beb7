/*
 * grpc_unary: the blocking unary gRPC call and the PEM reader that
 * libdetd, detctl, the daemon's etcd client and its node-to-node calls
 * share. It is the only code outside the server adapter (daemon/io/rpc.c)
 * and the etcd streams that starts gRPC calls.
 */
#ifndef DETD_GRPC_UNARY_H
#define DETD_GRPC_UNARY_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

/* Bytes of a status message kept (longer ones are cut). */
#define GRPC_UNARY_DETAILS_MAX 1024
/* The largest PEM file read. */
#define GRPC_UNARY_MAX_PEM (1024 * 1024)

/* What came back from one call. */
struct grpc_unary_result {
    grpc_status_code code;                /* the call's status */
    char details[GRPC_UNARY_DETAILS_MAX]; /* its message, NUL-terminated */
    grpc_byte_buffer *resp; /* the response (NULL: none); the caller frees
                               it with grpc_byte_buffer_destroy() */
};

/* Between slices of a wait: step out of gRPC (a lock's gate, a signal
 * check). ctx is grpc_unary_call()'s yield_ctx. */
typedef void (*grpc_unary_yield_cb)(void *ctx);

/*
 * One blocking unary call of method on ch: send req (borrowed; gRPC takes
 * its slices) with the initial metadata md[0..n_md) (may be NULL), and
 * wait until the call completes or deadline passes (gRPC ends the call
 * then with DEADLINE_EXCEEDED). With yield set, the wait is cut into
 * slices of slice_ms and yield(yield_ctx) runs between them. md_flags go
 * to the initial metadata: GRPC_INITIAL_METADATA_WAIT_FOR_READY makes a
 * call on a channel that is not connected wait for it (until deadline)
 * instead of failing at once. grpc_init()
 * must have been called. Returns 0 with *ret filled (the status is
 * ret->code: 0 does not mean the call succeeded), DETD_ENOMEM, or
 * DETD_EINTERNAL (the call could not be started; *ret->details says
 * why).
 */
int grpc_unary_call(grpc_channel *ch, const char *method, grpc_byte_buffer *req,
                    const grpc_metadata *md, size_t n_md, gpr_timespec deadline,
                    grpc_unary_yield_cb yield, void *yield_ctx,
                    int64_t slice_ms, uint32_t md_flags,
                    struct grpc_unary_result *ret);

/*
 * Read the PEM file at path (at most GRPC_UNARY_MAX_PEM bytes) into a
 * NUL-terminated heap string *ret (the caller frees it; wipe a key
 * first). Returns 0, -errno, DETD_ELIMIT (too large) or DETD_ENOMEM.
 */
int grpc_unary_read_pem(const char *path, char **ret);

/* TLS for grpc_unary_oneshot(): PEM paths; NULL members are unused. */
struct grpc_unary_tls {
    const char *ca_file;   /* roots to check the server against */
    const char *cert_file; /* client certificate and key, or NULL */
    const char *key_file;
};

/*
 * One blocking unary call on a channel of its own to target ("HOST:PORT"),
 * for the daemon's node-to-node calls (verify --cluster): sends req_len
 * bytes of req to method (a full path, "/detd.v1.Admin/ListObservations"),
 * waits at most timeout_ms (<= 0: 5 s). tls NULL: plaintext. Any thread
 * but one serving gRPC's own callbacks. On success *ret_resp (heap, caller
 * frees) holds *ret_len response bytes. Returns 0, DETD_EUNAVAILABLE /
 * DETD_ETIMEDOUT / DETD_EDENIED / DETD_EPROTO / -EIO (a PEM file) with
 * *ret_errmsg (heap, caller frees; may be NULL) naming the cause, or
 * DETD_ENOMEM.
 */
int grpc_unary_oneshot(const char *target, const char *method, const void *req,
                       size_t req_len, const struct grpc_unary_tls *tls,
                       int64_t timeout_ms, void **ret_resp, size_t *ret_len,
                       char **ret_errmsg);

#endif /* DETD_GRPC_UNARY_H */
