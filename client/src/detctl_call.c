/* detctl_call: Admin calls as detctl makes them (see detctl_call.h). */
#define _GNU_SOURCE
#include "detctl_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detctl_key.h"
#include "detd/client.h"
#include "wire.h"

/* See detctl_call.h. */
int detctl_call_fail(const struct detctl_opts *o, const char *what, int rc) {
    const char *detail = wire_last_error();
    if (detail[0] == '\0')
        detail = detd_strerror(rc);
    int ex = detctl_exit_for_rc(rc);
    if (ex == DETCTL_EXIT_UNAVAILABLE)
        fprintf(stderr, "detctl: cannot reach detd at '%s': %s\n", o->socket,
                detail);
    else
        fprintf(stderr, "detctl: %s (detd at '%s'): %s\n", what, o->socket,
                detail);
    return ex;
}

/* See detctl_call.h. */
int detctl_call(const struct detctl_opts *o, struct wire_channel *ch,
                const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc,
                ProtobufCMessage **ret) {
    int rc = wire_unary(ch, method, req, desc, o->timeout_ms, ret);
    if (rc < 0) {
        const char *what = strrchr(method, '/');
        return detctl_call_fail(o, what != NULL ? what + 1 : method, rc);
    }
    return DETCTL_EXIT_OK;
}

/* See detctl_call.h. */
void detctl_call_namespace(const struct detctl_opts *o, struct wire_channel *ch,
                           char *buf, size_t len, const char **ret_src) {
    if (o->namespace_ != NULL) {
        snprintf(buf, len, "%s", o->namespace_);
        if (ret_src != NULL)
            *ret_src = o->namespace_src;
        return;
    }
    if (ret_src != NULL)
        *ret_src = "daemon";
    buf[0] = '\0';
    Detd__V1__StatusRequest req = DETD__V1__STATUS_REQUEST__INIT;
    Detd__V1__StatusResponse *s = NULL;
    req.api_version = DETD_API_VERSION;
    if (wire_unary(ch, WIRE_METHOD_STATUS, &req.base,
                   &detd__v1__status_response__descriptor, o->timeout_ms,
                   (ProtobufCMessage **)&s) < 0)
        return;
    snprintf(buf, len, "%s", s->namespace_);
    protobuf_c_message_free_unpacked(&s->base, NULL);
}

/* See detctl_call.h. */
void detctl_call_print_namespace(const char *ns, const char *src) {
    printf("namespace: %s (%s)\n", ns[0] ? ns : "?",
           strcmp(src, "daemon") == 0 ? "the daemon's" : src);
}

static int add_id(char ***ids, size_t *n, const char *id) {
    for (size_t i = 0; i < *n; i++)
        if (strcmp((*ids)[i], id) == 0)
            return 0;
    char **g = realloc(*ids, (*n + 1) * sizeof(**ids));
    if (g == NULL)
        return -1;
    *ids = g;
    if ((g[*n] = strdup(id)) == NULL)
        return -1;
    (*n)++;
    return 0;
}

/* See detctl_call.h. */
int detctl_call_kernels(const struct detctl_opts *o, struct wire_channel *ch,
                        const char *ns, const char *pattern, int votes,
                        char ***ret_ids, size_t *ret_n) {
    char **ids = NULL;
    size_t n = 0;
    int ex = DETCTL_EXIT_OK;
    Detd__V1__ListDecisionsRequest req = DETD__V1__LIST_DECISIONS_REQUEST__INIT;
    Detd__V1__ListDecisionsResponse *r = NULL;
    req.api_version = DETD_API_VERSION;
    req.namespace_ = (char *)(ns ? ns : "");
    ex = detctl_call(o, ch, WIRE_METHOD_LIST_DECISIONS, &req.base,
                     &detd__v1__list_decisions_response__descriptor,
                     (ProtobufCMessage **)&r);
    if (ex != DETCTL_EXIT_OK)
        goto fail;
    for (size_t i = 0; i < r->n_decisions && ex == 0; i++)
        if (detctl_kernel_match(pattern, r->decisions[i]->kernel) &&
            add_id(&ids, &n, r->decisions[i]->kernel) != 0)
            ex = DETCTL_EXIT_ERROR;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    uint64_t after = 0;
    while (votes && ex == DETCTL_EXIT_OK) {
        Detd__V1__ListVotesRequest vq = DETD__V1__LIST_VOTES_REQUEST__INIT;
        Detd__V1__ListVotesResponse *v = NULL;
        vq.api_version = DETD_API_VERSION;
        vq.namespace_ = (char *)(ns ? ns : "");
        vq.after = after;
        ex = detctl_call(o, ch, WIRE_METHOD_LIST_VOTES, &vq.base,
                         &detd__v1__list_votes_response__descriptor,
                         (ProtobufCMessage **)&v);
        if (ex != DETCTL_EXIT_OK)
            goto fail;
        for (size_t i = 0; i < v->n_votes && ex == 0; i++)
            if (detctl_kernel_match(pattern, v->votes[i]->kernel) &&
                add_id(&ids, &n, v->votes[i]->kernel) != 0)
                ex = DETCTL_EXIT_ERROR;
        int more = v->truncated && v->n_votes > 0;
        after = v->next_after;
        protobuf_c_message_free_unpacked(&v->base, NULL);
        if (!more)
            break;
    }
    if (ex != DETCTL_EXIT_OK) {
        fprintf(stderr, "detctl: out of memory\n");
        goto fail;
    }
    *ret_ids = ids;
    *ret_n = n;
    return DETCTL_EXIT_OK;
fail:
    detctl_call_kernels_free(ids, n);
    return ex;
}

/* See detctl_call.h. */
void detctl_call_kernels_free(char **ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(ids[i]);
    free(ids);
}
