/* detctl_call: Admin calls as detctl makes them (see detctl_call.h). */
#define _GNU_SOURCE
#include "detctl_call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detctl_key.h"
#include "detd/client.h"
#include "wire.h"

/* Not in wire.h's list (detctl's call only). */
#define DETCTL_METHOD_LIST_OBSERVATIONS "/detd.v1.Admin/ListObservations"

static const char *str0(const char *s) {
    return s != NULL ? s : "";
}

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

/* See detctl_call.h. */
int detctl_call_observations(const struct detctl_opts *o,
                             struct wire_channel *ch, const char *ns,
                             Detd__V1__ListObservationsResponse ***ret_pages,
                             size_t *ret_n, int *ret_capped) {
    char *token = NULL;
    int ex = DETCTL_EXIT_OK;
    for (;;) {
        Detd__V1__ListObservationsRequest oq =
            DETD__V1__LIST_OBSERVATIONS_REQUEST__INIT;
        oq.api_version = DETD_API_VERSION;
        oq.namespace_ = (char *)ns;
        oq.page_size = o->page_size;
        oq.page_token = token != NULL ? token : "";
        Detd__V1__ListObservationsResponse *lo = NULL;
        ex = detctl_call(o, ch, DETCTL_METHOD_LIST_OBSERVATIONS, &oq.base,
                         &detd__v1__list_observations_response__descriptor,
                         (ProtobufCMessage **)&lo);
        if (ex != DETCTL_EXIT_OK)
            break;
        Detd__V1__ListObservationsResponse **nv =
            realloc(*ret_pages, (*ret_n + 1) * sizeof(*nv));
        if (nv == NULL) {
            protobuf_c_message_free_unpacked(&lo->base, NULL);
            fprintf(stderr, "detctl: out of memory\n");
            ex = DETCTL_EXIT_ERROR;
            break;
        }
        *ret_pages = nv;
        nv[(*ret_n)++] = lo;
        const char *next = str0(lo->next_page_token);
        if (next[0] == '\0') {
            *ret_capped |= lo->truncated;
            break;
        }
        /* A page that does not move on would never end. */
        if (lo->n_observations == 0 ||
            (token != NULL && strcmp(token, next) == 0)) {
            fprintf(stderr,
                    "detctl: verify: detd at '%s' answered a page of %zu "
                    "observations whose next page token '%.40s' does not "
                    "move on\n",
                    o->socket, lo->n_observations, next);
            ex = DETCTL_EXIT_ERROR;
            break;
        }
        token = lo->next_page_token;
    }
    return ex;
}

static int dec_by_kernel_key(const void *a, const void *b) {
    const Detd__V1__Decision *x = *(Detd__V1__Decision *const *)a;
    const Detd__V1__Decision *y = *(Detd__V1__Decision *const *)b;
    int c = strcmp(x->kernel, y->kernel);
    if (c == 0)
        c = strcmp(x->key, y->key);
    if (c == 0)
        c = strcmp(x->arch, y->arch);
    return c;
}

/* See detctl_call.h. */
int detctl_call_decisions(const struct detctl_opts *o, struct wire_channel *ch,
                          const char *ns, const char *kernel,
                          Detd__V1__ListDecisionsResponse **ret) {
    Detd__V1__ListDecisionsRequest req = DETD__V1__LIST_DECISIONS_REQUEST__INIT;
    Detd__V1__ListDecisionsResponse *all = NULL;
    char after[128] = "";
    req.api_version = DETD_API_VERSION;
    req.namespace_ = (char *)(ns ? ns : "");
    req.kernel = (char *)(kernel ? kernel : "");
    req.paged = 1;
    for (;;) {
        Detd__V1__ListDecisionsResponse *r = NULL;
        req.after_id = after;
        int ex = detctl_call(o, ch, WIRE_METHOD_LIST_DECISIONS, &req.base,
                             &detd__v1__list_decisions_response__descriptor,
                             (ProtobufCMessage **)&r);
        if (ex != DETCTL_EXIT_OK) {
            if (all != NULL)
                protobuf_c_message_free_unpacked(&all->base, NULL);
            return ex;
        }
        const char *next = r->next_after_id ? r->next_after_id : "";
        /* A daemon before 0.9 does not page (no next id): its one answer,
         * truncated at its cap, is all there is. */
        int more = r->truncated && r->n_decisions > 0 && next[0] != '\0' &&
                   strcmp(next, after) != 0 && strlen(next) < sizeof after;
        if (more)
            snprintf(after, sizeof after, "%s", next); /* r is freed below */
        if (all == NULL) {
            all = r;
        } else {
            Detd__V1__Decision **g =
                realloc(all->decisions,
                        (all->n_decisions + r->n_decisions) * sizeof(*g));
            if (g == NULL) {
                protobuf_c_message_free_unpacked(&r->base, NULL);
                protobuf_c_message_free_unpacked(&all->base, NULL);
                fprintf(stderr, "detctl: out of memory\n");
                return DETCTL_EXIT_ERROR;
            }
            memcpy(g + all->n_decisions, r->decisions,
                   r->n_decisions * sizeof(*g));
            all->decisions = g;
            all->n_decisions += r->n_decisions;
            all->truncated = r->truncated;
            r->n_decisions = 0; /* moved into all */
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        if (!more)
            break;
    }
    if (all->n_decisions > 1)
        qsort(all->decisions, all->n_decisions, sizeof(*all->decisions),
              dec_by_kernel_key);
    *ret = all;
    return DETCTL_EXIT_OK;
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
                        const char *ns, const char *pattern, int from,
                        char ***ret_ids, size_t *ret_n) {
    char **ids = NULL;
    size_t n = 0;
    int ex = DETCTL_EXIT_OK;
    Detd__V1__ListDecisionsResponse *r = NULL;
    ex = detctl_call_decisions(o, ch, ns, NULL, &r);
    if (ex != DETCTL_EXIT_OK)
        goto fail;
    for (size_t i = 0; i < r->n_decisions && ex == 0; i++)
        if (detctl_kernel_match(pattern, r->decisions[i]->kernel) &&
            add_id(&ids, &n, r->decisions[i]->kernel) != 0)
            ex = DETCTL_EXIT_ERROR;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    uint64_t after = 0;
    while ((from & DETCTL_KERNELS_VOTES) && ex == DETCTL_EXIT_OK) {
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
    if (ex == DETCTL_EXIT_OK && (from & DETCTL_KERNELS_OBSERVED)) {
        Detd__V1__ListObservationsResponse **pages = NULL;
        size_t np = 0;
        int capped = 0;
        int cx =
            detctl_call_observations(o, ch, ns ? ns : "", &pages, &np, &capped);
        for (size_t p = 0; p < np; p++) {
            for (size_t i = 0; ex == 0 && i < pages[p]->n_observations; i++)
                if (detctl_kernel_match(pattern,
                                        pages[p]->observations[i]->kernel) &&
                    add_id(&ids, &n, pages[p]->observations[i]->kernel) != 0)
                    ex = DETCTL_EXIT_ERROR;
            protobuf_c_message_free_unpacked(&pages[p]->base, NULL);
        }
        free(pages);
        if (cx != DETCTL_EXIT_OK) {
            ex = cx; /* the call failed: printed */
            goto fail;
        }
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
