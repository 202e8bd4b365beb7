/*
 * grpc_unary: one blocking unary call, a one-shot call on its own channel,
 * one PEM reader (see grpc_unary.h).
 */
#define _GNU_SOURCE
#include "grpc_unary.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "detd/error.h"
#include "strfmt.h"

/* The wait's next slice: now + slice_ms, never past deadline. */
static gpr_timespec slice_end(gpr_timespec deadline, int64_t slice_ms) {
    gpr_timespec now = gpr_now(deadline.clock_type);
    gpr_timespec end =
        gpr_time_add(now, gpr_time_from_millis(slice_ms, GPR_TIMESPAN));
    return gpr_time_cmp(end, deadline) < 0 ? end : deadline;
}

/* See grpc_unary.h. */
int grpc_unary_call(grpc_channel *ch, const char *method, grpc_byte_buffer *req,
                    const grpc_metadata *md, size_t n_md, gpr_timespec deadline,
                    grpc_unary_yield_cb yield, void *yield_ctx,
                    int64_t slice_ms, uint32_t md_flags,
                    struct grpc_unary_result *ret) {
    grpc_metadata_array init_md, trail_md;
    grpc_slice details = grpc_empty_slice();
    int rc = 0;
    ret->code = GRPC_STATUS_UNKNOWN;
    ret->details[0] = '\0';
    ret->resp = NULL;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    if (cq == NULL)
        return DETD_ENOMEM;
    grpc_metadata_array_init(&init_md);
    grpc_metadata_array_init(&trail_md);
    grpc_slice m = grpc_slice_from_copied_string(method);
    grpc_call *call = grpc_channel_create_call(
        ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, m, NULL, deadline, NULL);
    grpc_slice_unref(m);
    if (call == NULL) {
        rc = DETD_ENOMEM;
        goto out;
    }
    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].flags = md_flags;
    ops[0].data.send_initial_metadata.count = n_md;
    ops[0].data.send_initial_metadata.metadata = (grpc_metadata *)md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = req;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &init_md;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &ret->resp;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &trail_md;
    ops[5].data.recv_status_on_client.status = &ret->code;
    ops[5].data.recv_status_on_client.status_details = &details;
    void *tag = (void *)(intptr_t)1;
    if (grpc_call_start_batch(call, ops, 6, tag, NULL) != GRPC_CALL_OK) {
        snprintf(ret->details, sizeof(ret->details),
                 "%s: cannot start the call", method);
        rc = DETD_EINTERNAL;
        goto out;
    }
    grpc_event ev;
    for (;;) {
        /* The call ends by its deadline at the latest, so an infinite
         * wait (no yield) returns. */
        gpr_timespec until = yield != NULL ? slice_end(deadline, slice_ms)
                                           : gpr_inf_future(GPR_CLOCK_REALTIME);
        ev = grpc_completion_queue_pluck(cq, tag, until, NULL);
        if (ev.type != GRPC_QUEUE_TIMEOUT)
            break;
        yield(yield_ctx);
    }
    if (ev.type != GRPC_OP_COMPLETE) {
        snprintf(ret->details, sizeof(ret->details),
                 "%s: completion queue failed", method);
        rc = DETD_EINTERNAL;
        goto out;
    }
    size_t n = GRPC_SLICE_LENGTH(details);
    if (n >= sizeof(ret->details))
        n = sizeof(ret->details) - 1;
    memcpy(ret->details, GRPC_SLICE_START_PTR(details), n);
    ret->details[n] = '\0';
out:
    if (rc != 0 && ret->resp != NULL) {
        grpc_byte_buffer_destroy(ret->resp);
        ret->resp = NULL;
    }
    if (call != NULL)
        grpc_call_unref(call);
    grpc_completion_queue_shutdown(cq);
    grpc_completion_queue_destroy(cq);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&init_md);
    grpc_metadata_array_destroy(&trail_md);
    return rc;
}

/* See grpc_unary.h. */
int grpc_unary_read_pem(const char *path, char **ret) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -errno;
    int rc = 0;
    size_t n = 0;
    char *buf = malloc(GRPC_UNARY_MAX_PEM + 1);
    if (buf == NULL) {
        rc = DETD_ENOMEM;
        goto out;
    }
    n = fread(buf, 1, GRPC_UNARY_MAX_PEM + 1, f);
    if (ferror(f)) {
        rc = -EIO;
    } else if (n > GRPC_UNARY_MAX_PEM) {
        rc = DETD_ELIMIT;
    } else {
        buf[n] = '\0';
        char *shrunk = realloc(buf, n + 1);
        *ret = shrunk != NULL ? shrunk : buf;
        buf = NULL;
    }
out:
    if (buf != NULL) {
        memset(buf, 0, n < GRPC_UNARY_MAX_PEM ? n : GRPC_UNARY_MAX_PEM);
        free(buf);
    }
    fclose(f);
    return rc;
}

static void grpc_init_once(void) {
    grpc_init();
}

/* A PEM file's contents, or NULL with *ret_err (heap) naming the file. */
static char *read_pem_or_say(const char *path, char **ret_err) {
    char *buf = NULL;
    int rc = grpc_unary_read_pem(path, &buf);
    if (rc != 0)
        *ret_err = strfmt("read '%s': %s", path,
                          rc == DETD_ELIMIT ? "too large" : detd_strerror(rc));
    return buf;
}

/* See grpc_unary.h. */
int grpc_unary_oneshot(const char *target, const char *method, const void *req,
                       size_t req_len, const struct grpc_unary_tls *tls,
                       int64_t timeout_ms, void **ret_resp, size_t *ret_len,
                       char **ret_errmsg) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    char *err = NULL;
    int rc = 0;
    char *ca = NULL, *cert = NULL, *key = NULL;
    grpc_channel_credentials *creds = NULL;
    grpc_channel *ch = NULL;
    grpc_byte_buffer *bb = NULL;
    struct grpc_unary_result res = {.resp = NULL};
    if (ret_errmsg != NULL)
        *ret_errmsg = NULL;
    pthread_once(&once, grpc_init_once);
    if (tls != NULL) {
        if (tls->ca_file != NULL &&
            (ca = read_pem_or_say(tls->ca_file, &err)) == NULL)
            goto fail_io;
        if (tls->cert_file != NULL && tls->key_file != NULL &&
            ((cert = read_pem_or_say(tls->cert_file, &err)) == NULL ||
             (key = read_pem_or_say(tls->key_file, &err)) == NULL))
            goto fail_io;
        grpc_ssl_pem_key_cert_pair pair = {key, cert};
        creds = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL,
                                            NULL, NULL);
    } else {
        creds = grpc_insecure_credentials_create();
    }
    if (creds == NULL) {
        rc = DETD_EINVAL;
        err = strfmt("client credentials for %s", target);
        goto out;
    }
    ch = grpc_channel_create(target, creds, NULL);
    grpc_slice sl = grpc_slice_from_copied_buffer(req, req_len);
    bb = grpc_raw_byte_buffer_create(&sl, 1);
    grpc_slice_unref(sl);
    if (ch == NULL || bb == NULL) {
        rc = DETD_ENOMEM;
        goto out;
    }
    gpr_timespec dl = gpr_time_add(
        gpr_now(GPR_CLOCK_REALTIME),
        gpr_time_from_millis(timeout_ms > 0 ? timeout_ms : 5000, GPR_TIMESPAN));
    rc = grpc_unary_call(ch, method, bb, NULL, 0, dl, NULL, NULL, 0, 0, &res);
    if (rc != 0)
        goto out;
    if (res.code != GRPC_STATUS_OK) {
        rc = res.code == GRPC_STATUS_DEADLINE_EXCEEDED ? DETD_ETIMEDOUT
             : res.code == GRPC_STATUS_PERMISSION_DENIED ||
                     res.code == GRPC_STATUS_UNAUTHENTICATED
                 ? DETD_EDENIED
                 : DETD_EUNAVAILABLE;
        err = strfmt("%s %s: status %d: %s", target, method, (int)res.code,
                     res.details);
        goto out;
    }
    if (res.resp == NULL) {
        rc = DETD_EPROTO;
        err = strfmt("%s %s: no response message", target, method);
        goto out;
    }
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, res.resp)) {
        rc = DETD_EPROTO;
        goto out;
    }
    grpc_slice all = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    size_t n = GRPC_SLICE_LENGTH(all);
    void *out = malloc(n > 0 ? n : 1);
    if (out == NULL) {
        grpc_slice_unref(all);
        rc = DETD_ENOMEM;
        goto out;
    }
    memcpy(out, GRPC_SLICE_START_PTR(all), n);
    grpc_slice_unref(all);
    *ret_resp = out;
    *ret_len = n;
    goto out;
fail_io:
    rc = -EIO;
out:
    if (bb != NULL)
        grpc_byte_buffer_destroy(bb);
    if (res.resp != NULL)
        grpc_byte_buffer_destroy(res.resp);
    if (ch != NULL)
        grpc_channel_destroy(ch);
    if (creds != NULL)
        grpc_channel_credentials_release(creds);
    free(ca);
    free(cert);
    if (key != NULL) {
        memset(key, 0, strlen(key));
        free(key);
    }
    if (ret_errmsg != NULL)
        *ret_errmsg = err;
    else
        free(err);
    return rc;
}
