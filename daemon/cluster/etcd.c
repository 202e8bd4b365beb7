/*
 * etcd adapter over gRPC C core and protobuf-c. See etcd.h for the
 * contracts. Here: options, endpoints, channels, one unary attempt,
 * authentication, the retry loop and member status. Key-value and lease
 * calls are in etcd_kv.c, the two long-lived streams (watch, lease
 * keep-alive) in etcd_stream.c; they share etcd_int.h.
 */
#define _POSIX_C_SOURCE 200809L

#include "grpc_unary.h"
#include "cluster/etcd.h"
#include "clock.h"
#include "cluster/etcd_int.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

#include "detd/error.h"

#define DEFAULT_ATTEMPT_MS 2000
#define DEFAULT_TOTAL_MS 10000
#define DEFAULT_PAGE 500
#define BACKOFF_FIRST_MS 50
#define BACKOFF_MAX_MS 1000

#define M_STATUS "/etcdserverpb.Maintenance/Status"
#define M_AUTH "/etcdserverpb.Auth/Authenticate"

/* ---- time ---------------------------------------------------------- */

gpr_timespec etcd_deadline(int64_t at_ms) {
    int64_t left = at_ms - clock_mono_ms();
    if (left < 0)
        left = 0;
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                        gpr_time_from_millis(left, GPR_TIMESPAN));
}

void etcd_sleep_ms(int64_t ms) {
    if (ms <= 0)
        return;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Backoff with jitter in [d/2, d]; rand_r keeps threads independent. */
int64_t etcd_jitter(int64_t d, unsigned *seed) {
    if (d < 2)
        return d;
    return d / 2 + (int64_t)(rand_r(seed) % (unsigned)(d / 2 + 1));
}

/* ---- errors -------------------------------------------------------- */

int etcd_status_err(grpc_status_code code, const char *msg) {
    switch (code) {
    case GRPC_STATUS_OK:
        return 0;
    case GRPC_STATUS_DEADLINE_EXCEEDED:
        return DETD_ETIMEDOUT;
    case GRPC_STATUS_UNAVAILABLE:
        return DETD_EUNAVAILABLE;
    case GRPC_STATUS_CANCELLED:
        return DETD_ECANCELLED;
    case GRPC_STATUS_UNAUTHENTICATED:
    case GRPC_STATUS_PERMISSION_DENIED:
        return DETD_EDENIED;
    case GRPC_STATUS_INVALID_ARGUMENT:
        if (strstr(msg, "authentication failed") ||
            strstr(msg, "user name is empty") || strstr(msg, "auth token"))
            return DETD_EDENIED;
        if (strstr(msg, "too large"))
            return DETD_ELIMIT;
        return DETD_EINVAL;
    case GRPC_STATUS_OUT_OF_RANGE:
        if (strstr(msg, "compacted"))
            return DETD_ESTALE;
        return DETD_EINVAL;
    case GRPC_STATUS_NOT_FOUND:
        return DETD_ENOTFOUND;
    case GRPC_STATUS_RESOURCE_EXHAUSTED:
        if (strstr(msg, "larger than max"))
            return DETD_ELIMIT;
        return DETD_EBUSY;
    case GRPC_STATUS_UNIMPLEMENTED:
        return DETD_EUNIMPL;
    case GRPC_STATUS_UNKNOWN:
        /* etcd 3.4 returns a server-side context error as it is, and its
         * gRPC sends that as UNKNOWN: a linearizable read that found no
         * quorum before the call's deadline ends this way, a moment before
         * our own deadline would. It is a timeout, and retried as one. */
        if (strstr(msg, "context deadline exceeded"))
            return DETD_ETIMEDOUT;
        return DETD_EPROTO;
    default:
        return DETD_EPROTO;
    }
}

static int retryable(int err) {
    return err == DETD_ETIMEDOUT || err == DETD_EUNAVAILABLE ||
           err == DETD_EBUSY;
}

/* An expired or unknown token: re-authenticate once and retry. */
static int token_rejected(grpc_status_code code, const char *msg) {
    return code == GRPC_STATUS_UNAUTHENTICATED ||
           strstr(msg, "invalid auth token") != NULL;
}

/* ---- endpoints and channels ---------------------------------------- */

static char *xstrdup(const char *s) {
    return s == NULL ? NULL : strdup(s);
}

/*
 * Parse one URL into "host:port" (IPv6 bracketed) and its family:
 * 4, 6 or 0 for a name. Returns 0 or DETD_EINVAL.
 */
static int parse_endpoint(const char *url, int *tls, char *hostport, size_t cap,
                          int *family, char *ret_host, size_t host_cap) {
    const char *p;
    if (strncmp(url, "http://", 7) == 0) {
        *tls = 0;
        p = url + 7;
    } else if (strncmp(url, "https://", 8) == 0) {
        *tls = 1;
        p = url + 8;
    } else {
        return DETD_EINVAL;
    }
    char host[256];
    const char *port = NULL;
    size_t hl;
    if (*p == '[') {
        const char *e = strchr(p, ']');
        if (e == NULL)
            return DETD_EINVAL;
        hl = (size_t)(e - p - 1);
        if (hl == 0 || hl >= sizeof(host))
            return DETD_EINVAL;
        memcpy(host, p + 1, hl);
        host[hl] = '\0';
        if (e[1] == ':')
            port = e + 2;
        else if (e[1] != '\0' && e[1] != '/')
            return DETD_EINVAL;
    } else {
        hl = strcspn(p, ":/");
        if (hl == 0 || hl >= sizeof(host))
            return DETD_EINVAL;
        memcpy(host, p, hl);
        host[hl] = '\0';
        if (p[hl] == ':')
            port = p + hl + 1;
    }
    long portno = 2379;
    if (port != NULL) {
        char *end;
        errno = 0;
        portno = strtol(port, &end, 10);
        if (errno != 0 || end == port || (*end != '\0' && *end != '/') ||
            portno <= 0 || portno > 65535)
            return DETD_EINVAL;
        if (*end == '/' && end[1] != '\0')
            return DETD_EINVAL;
    }
    unsigned char buf[16];
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    int n;
    if (inet_pton(AF_INET, host, buf) == 1) {
        *family = 4;
        n = snprintf(hostport, cap, "%s:%ld", host, portno);
    } else if (inet_pton(AF_INET6, host, buf) == 1) {
        *family = 6;
        n = snprintf(hostport, cap, "[%s]:%ld", host, portno);
    } else {
        *family = 0;
        n = snprintf(hostport, cap, "%s:%ld", host, portno);
    }
    if (n < 0 || (size_t)n >= cap || strlen(host) >= host_cap)
        return DETD_EINVAL;
    snprintf(ret_host, host_cap, "%s", host);
    return 0;
}

static char *target_for(int family, const char *hostports) {
    const char *scheme = family == 4   ? "ipv4:"
                         : family == 6 ? "ipv6:"
                                       : "dns:///";
    size_t n = strlen(scheme) + strlen(hostports) + 1;
    char *t = malloc(n);
    if (t != NULL)
        snprintf(t, n, "%s%s", scheme, hostports);
    return t;
}

grpc_channel *etcd_channel_new(etcd_client *c, const char *target,
                               const char *tls_name) {
    char sc[160];
    snprintf(sc, sizeof(sc), "{\"loadBalancingConfig\":[{\"%s\":{}}]}",
             c->lb_policy);
    grpc_arg args[11];
    int n = 0;
#define ARG_INT(k, v)                                                          \
    args[n].type = GRPC_ARG_INTEGER;                                           \
    args[n].key = (char *)(k);                                                 \
    args[n++].value.integer = (v)
#define ARG_STR(k, v)                                                          \
    args[n].type = GRPC_ARG_STRING;                                            \
    args[n].key = (char *)(k);                                                 \
    args[n++].value.string = (char *)(v)
    ARG_INT(GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, ETCD_MAX_MESSAGE);
    ARG_INT(GRPC_ARG_MAX_SEND_MESSAGE_LENGTH, ETCD_MAX_MESSAGE);
    ARG_INT(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    ARG_INT(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    ARG_INT(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    /* Detect a member that vanished without closing its sockets; etcd
     * accepts pings every 5 s by default. */
    ARG_INT(GRPC_ARG_KEEPALIVE_TIME_MS, 10000);
    ARG_INT(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
    ARG_INT(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    ARG_INT(GRPC_ARG_ENABLE_RETRIES, 0); /* retries are ours */
    ARG_STR(GRPC_ARG_SERVICE_CONFIG, sc);
    if (c->tls && tls_name != NULL) {
        ARG_STR(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, tls_name);
    }
#undef ARG_INT
#undef ARG_STR
    grpc_channel_args ca = {(size_t)n, args};
    return grpc_channel_create(target, c->creds, &ca);
}

static int make_creds(etcd_client *c, const struct etcd_options *opt) {
    if (!c->tls) {
        c->creds = grpc_insecure_credentials_create();
        return c->creds == NULL ? DETD_EINTERNAL : 0;
    }
    char *ca = NULL, *cert = NULL, *key = NULL;
    int err = 0;
    if (opt->ca_file != NULL &&
        (err = grpc_unary_read_pem(opt->ca_file, &ca)) != 0)
        goto out;
    if (opt->cert_file != NULL &&
        (err = grpc_unary_read_pem(opt->cert_file, &cert)) != 0)
        goto out;
    if (opt->key_file != NULL &&
        (err = grpc_unary_read_pem(opt->key_file, &key)) != 0)
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {key, cert};
    c->creds = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL,
                                           NULL, NULL);
    if (c->creds == NULL)
        err = DETD_EINVAL;
out:
    free(ca);
    free(cert);
    if (key != NULL)
        memset(key, 0, strlen(key));
    free(key);
    return err;
}

void etcd_options_init(struct etcd_options *opt) {
    memset(opt, 0, sizeof(*opt));
    opt->attempt_timeout_ms = DEFAULT_ATTEMPT_MS;
    opt->total_timeout_ms = DEFAULT_TOTAL_MS;
    opt->range_page = DEFAULT_PAGE;
    opt->lb_policy = "round_robin";
}

static int parse_endpoints(etcd_client *c, const char *list) {
    char hostports[ETCD_MAX_ENDPOINTS * 280];
    size_t hlen = 0;
    int family = -1;
    const char *p = list;
    hostports[0] = '\0';
    while (*p != '\0') {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '\0')
            break;
        size_t len = strcspn(p, ", ");
        if (c->n_endpoints == ETCD_MAX_ENDPOINTS || len >= 256)
            return DETD_EINVAL;
        char url[256], hp[272], host[256];
        memcpy(url, p, len);
        url[len] = '\0';
        p += len;
        int tls, fam;
        int err =
            parse_endpoint(url, &tls, hp, sizeof(hp), &fam, host, sizeof(host));
        if (err != 0)
            return err;
        if (c->n_endpoints == 0 && (c->first_host = strdup(host)) == NULL)
            return DETD_ENOMEM;
        if (c->n_endpoints > 0 && (tls != c->tls || fam != family))
            return DETD_EINVAL; /* one scheme and one address family */
        c->tls = tls;
        family = fam;
        size_t i = c->n_endpoints;
        c->endpoints[i] = strdup(url);
        c->targets[i] = target_for(fam, hp);
        if (c->endpoints[i] == NULL || c->targets[i] == NULL)
            return DETD_ENOMEM;
        c->n_endpoints++;
        hlen += (size_t)snprintf(hostports + hlen, sizeof(hostports) - hlen,
                                 "%s%s", i > 0 ? "," : "", hp);
    }
    if (c->n_endpoints == 0)
        return DETD_EINVAL;
    /* gRPC resolves several addresses only as literals. */
    if (family == 0 && c->n_endpoints > 1)
        return DETD_EINVAL;
    c->target = target_for(family, hostports);
    return c->target == NULL ? DETD_ENOMEM : 0;
}

int etcd_open(const struct etcd_options *opt, etcd_client **ret) {
    if (opt == NULL || ret == NULL || opt->endpoints == NULL ||
        (opt->user == NULL) != (opt->password == NULL) ||
        (opt->cert_file == NULL) != (opt->key_file == NULL) ||
        opt->attempt_timeout_ms <= 0 || opt->total_timeout_ms <= 0 ||
        opt->range_page <= 0 || opt->range_page > ETCD_MAX_PAGE)
        return DETD_EINVAL;
    const char *lb = opt->lb_policy != NULL ? opt->lb_policy : "round_robin";
    if (strcmp(lb, "round_robin") != 0 && strcmp(lb, "pick_first") != 0)
        return DETD_EINVAL;
    etcd_client *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return DETD_ENOMEM;
    grpc_init();
    int err = 0;
    pthread_mutex_init(&c->auth_mu, NULL);
    c->attempt_ms = opt->attempt_timeout_ms;
    c->total_ms = opt->total_timeout_ms;
    c->range_page = opt->range_page;
    c->seed = (unsigned)clock_mono_ms() ^ (unsigned)(uintptr_t)c;
    c->lb_policy = strdup(lb);
    c->user = xstrdup(opt->user);
    c->password = xstrdup(opt->password);
    c->tls_server_name = xstrdup(opt->tls_server_name);
    if (c->lb_policy == NULL || (opt->user != NULL && c->user == NULL) ||
        (opt->password != NULL && c->password == NULL) ||
        (opt->tls_server_name != NULL && c->tls_server_name == NULL)) {
        err = DETD_ENOMEM;
        goto out;
    }
    if ((err = parse_endpoints(c, opt->endpoints)) != 0)
        goto out;
    if ((err = make_creds(c, opt)) != 0)
        goto out;
    /* A multi-address channel would check each member's certificate
     * against the whole address list: name one host instead. */
    c->channel =
        etcd_channel_new(c, c->target,
                         c->tls_server_name != NULL ? c->tls_server_name
                         : c->n_endpoints > 1       ? c->first_host
                                                    : NULL);
    if (c->channel == NULL) {
        err = DETD_EINTERNAL;
        goto out;
    }
    *ret = c;
    c = NULL;
out:
    etcd_close(c);
    return err;
}

void etcd_close(etcd_client *c) {
    if (c == NULL)
        return;
    if (c->channel != NULL)
        grpc_channel_destroy(c->channel);
    if (c->creds != NULL)
        grpc_channel_credentials_release(c->creds);
    for (size_t i = 0; i < c->n_endpoints; i++) {
        free(c->endpoints[i]);
        free(c->targets[i]);
    }
    free(c->target);
    free(c->lb_policy);
    free(c->user);
    if (c->password != NULL)
        memset(c->password, 0, strlen(c->password));
    free(c->password);
    free(c->tls_server_name);
    free(c->first_host);
    free(c->token);
    pthread_mutex_destroy(&c->auth_mu);
    free(c);
    grpc_shutdown();
}

/* ---- one unary attempt --------------------------------------------- */

void etcd_md_fill(grpc_metadata *md, size_t *n, const char *token,
                  int hasleader) {
    *n = 0;
    if (token != NULL) {
        memset(&md[*n], 0, sizeof(md[0]));
        md[*n].key = grpc_slice_from_static_string("token");
        md[*n].value = grpc_slice_from_copied_string(token);
        (*n)++;
    }
    if (hasleader) {
        /* Ask the member to end the stream when it loses its leader. */
        memset(&md[*n], 0, sizeof(md[0]));
        md[*n].key = grpc_slice_from_static_string("hasleader");
        md[*n].value = grpc_slice_from_static_string("true");
        (*n)++;
    }
}

void etcd_md_free(grpc_metadata *md, size_t n) {
    for (size_t i = 0; i < n; i++) {
        grpc_slice_unref(md[i].key);
        grpc_slice_unref(md[i].value);
    }
}

/* Serialise m into a new slice; 0 or DETD_ELIMIT. */
static int pack_slice(const ProtobufCMessage *m, grpc_slice *ret) {
    size_t len = protobuf_c_message_get_packed_size(m);
    if (len > ETCD_MAX_MESSAGE)
        return DETD_ELIMIT;
    *ret = grpc_slice_malloc(len);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(*ret));
    return 0;
}

grpc_byte_buffer *etcd_pack(const ProtobufCMessage *m) {
    grpc_slice s;
    if (pack_slice(m, &s) != 0)
        return NULL;
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

int etcd_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                ProtobufCMessage **ret) {
    if (grpc_byte_buffer_length(bb) > ETCD_MAX_MESSAGE)
        return DETD_ELIMIT;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return DETD_EPROTO;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *m = protobuf_c_message_unpack(
        d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    if (m == NULL)
        return DETD_EPROTO;
    *ret = m;
    return 0;
}

void etcd_copy_details(grpc_slice details, char *msg, size_t cap) {
    size_t n = GRPC_SLICE_LENGTH(details);
    if (n >= cap)
        n = cap - 1;
    memcpy(msg, GRPC_SLICE_START_PTR(details), n);
    msg[n] = '\0';
}

/*
 * One attempt on channel ch. Sets *code and msg (the status details); on
 * OK with a message, *ret gets it. Returns 0, or a local error (no status).
 */
static int rpc_once(grpc_channel *ch, const char *method, grpc_byte_buffer *req,
                    const char *token, gpr_timespec deadline,
                    const ProtobufCMessageDescriptor *rdesc,
                    grpc_status_code *code, char *msg, size_t msgcap,
                    ProtobufCMessage **ret) {
    grpc_metadata md[2];
    size_t nmd;
    etcd_md_fill(md, &nmd, token, 0);
    struct grpc_unary_result res;
    /* Wait for ready: a call that fails fast while the channel reconnects
     * drives no reconnection, and a channel whose members all came back
     * at once could stay failing with its connections open. */
    int err = grpc_unary_call(ch, method, req, md, nmd, deadline, NULL, NULL, 0,
                              GRPC_INITIAL_METADATA_WAIT_FOR_READY, &res);
    etcd_md_free(md, nmd);
    *code = res.code;
    size_t n = strnlen(res.details, msgcap - 1); /* cut to the caller's */
    memcpy(msg, res.details, n);
    msg[n] = '\0';
    if (err == 0 && res.code == GRPC_STATUS_OK)
        err =
            res.resp == NULL ? DETD_EPROTO : etcd_unpack(res.resp, rdesc, ret);
    if (res.resp != NULL)
        grpc_byte_buffer_destroy(res.resp);
    return err;
}

/* ---- authentication ------------------------------------------------ */

/*
 * Copy the current token into *ret_token (NULL when auth is off or not
 * enabled on the server) and its generation into *ret_gen. Authenticates
 * when there is no token, or when the token of generation stale_gen was
 * rejected. One thread authenticates at a time; others wait for it.
 */
int etcd_auth_token(etcd_client *c, int64_t end_ms, uint64_t stale_gen,
                    char **ret_token, uint64_t *ret_gen) {
    *ret_token = NULL;
    *ret_gen = 0;
    if (c->user == NULL)
        return 0;
    int err = 0;
    pthread_mutex_lock(&c->auth_mu);
    if (c->token_gen == 0 || c->token_gen == stale_gen) {
        Etcdserverpb__AuthenticateRequest req =
            ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
        req.name = c->user;
        req.password = c->password;
        grpc_byte_buffer *bb = etcd_pack(&req.base);
        if (bb == NULL) {
            err = DETD_ELIMIT;
            goto out;
        }
        int64_t at = clock_mono_ms() + c->attempt_ms;
        grpc_status_code code;
        char msg[256];
        ProtobufCMessage *m = NULL;
        err = rpc_once(c->channel, M_AUTH, bb, NULL,
                       etcd_deadline(at < end_ms ? at : end_ms),
                       &etcdserverpb__authenticate_response__descriptor, &code,
                       msg, sizeof(msg), &m);
        grpc_byte_buffer_destroy(bb);
        if (err != 0)
            goto out;
        if (code == GRPC_STATUS_FAILED_PRECONDITION &&
            strstr(msg, "not enabled") != NULL) {
            free(c->token); /* auth is off on the server: no token */
            c->token = NULL;
        } else if (code != GRPC_STATUS_OK) {
            err = etcd_status_err(code, msg);
            goto out;
        } else {
            Etcdserverpb__AuthenticateResponse *r = (void *)m;
            char *t = strdup(r->token != NULL ? r->token : "");
            protobuf_c_message_free_unpacked(m, NULL);
            if (t == NULL) {
                err = DETD_ENOMEM;
                goto out;
            }
            free(c->token);
            c->token = t;
        }
        c->token_gen++;
        if (c->token_gen == 0)
            c->token_gen = 1;
    }
    if (c->token != NULL && (*ret_token = strdup(c->token)) == NULL) {
        err = DETD_ENOMEM;
        goto out;
    }
    *ret_gen = c->token_gen;
out:
    pthread_mutex_unlock(&c->auth_mu);
    return err;
}

/* ---- unary call with deadline, retries and auth -------------------- */

static _Thread_local int64_t thread_deadline_ms;

/* See etcd.h. */
void etcd_thread_deadline(int64_t deadline_ms) {
    thread_deadline_ms = deadline_ms;
}

/* See etcd.h. */
void etcd_set_cancelled(etcd_client *c, int on) {
    if (c != NULL)
        atomic_store(&c->cancelled, on);
}

int etcd_call_unary(etcd_client *c, const char *method,
                    const ProtobufCMessage *req,
                    const ProtobufCMessageDescriptor *rdesc,
                    ProtobufCMessage **ret) {
    /* A send takes the slices out of its byte buffer: every attempt gets a
     * new buffer referencing the same packed bytes. */
    grpc_slice packed;
    if (pack_slice(req, &packed) != 0)
        return DETD_ELIMIT;
    int64_t end = clock_mono_ms() + c->total_ms;
    if (thread_deadline_ms > 0 && thread_deadline_ms < end)
        end = thread_deadline_ms;
    int64_t backoff = BACKOFF_FIRST_MS;
    uint64_t stale = 0;
    int refreshed = 0, err;
    unsigned seed = c->seed ^ (unsigned)(uintptr_t)&seed;
    for (;;) {
        if (atomic_load(&c->cancelled)) {
            err = DETD_ECANCELLED;
            break;
        }
        char *token = NULL;
        uint64_t gen = 0;
        grpc_status_code code = GRPC_STATUS_UNKNOWN;
        char msg[256] = "";
        err = etcd_auth_token(c, end, stale, &token, &gen);
        if (err == 0) {
            int64_t at = clock_mono_ms() + c->attempt_ms;
            grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&packed, 1);
            err = rpc_once(c->channel, method, bb, token,
                           etcd_deadline(at < end ? at : end), rdesc, &code,
                           msg, sizeof(msg), ret);
            grpc_byte_buffer_destroy(bb);
            if (err == 0)
                err = etcd_status_err(code, msg);
        }
        free(token);
        if (err == 0)
            break;
        if (c->user != NULL && !refreshed && token_rejected(code, msg)) {
            refreshed = 1;
            stale = gen;
            continue;
        }
        int64_t now = clock_mono_ms();
        if (!retryable(err) || now >= end)
            break;
        int64_t d = etcd_jitter(backoff, &seed);
        int64_t until = now + (now + d < end ? d : end - now);
        /* in slices, so that a cancel ends the wait too */
        while (!atomic_load(&c->cancelled) && clock_mono_ms() < until) {
            int64_t left = until - clock_mono_ms();
            etcd_sleep_ms(left < 20 ? left : 20);
        }
        backoff = backoff * 2 < BACKOFF_MAX_MS ? backoff * 2 : BACKOFF_MAX_MS;
    }
    grpc_slice_unref(packed);
    return err;
}

/* ---- status -------------------------------------------------------- */

static void status_one(etcd_client *c, size_t i, const char *token,
                       struct etcd_member_status *st) {
    memset(st, 0, sizeof(*st));
    snprintf(st->endpoint, sizeof(st->endpoint), "%s", c->endpoints[i]);
    grpc_channel *ch = etcd_channel_new(c, c->targets[i], c->tls_server_name);
    if (ch == NULL) {
        st->err = DETD_EINTERNAL;
        return;
    }
    Etcdserverpb__StatusRequest req = ETCDSERVERPB__STATUS_REQUEST__INIT;
    grpc_byte_buffer *bb = etcd_pack(&req.base);
    grpc_status_code code;
    char msg[256];
    ProtobufCMessage *m = NULL;
    int err = bb == NULL
                  ? DETD_ENOMEM
                  : rpc_once(ch, M_STATUS, bb, token,
                             etcd_deadline(clock_mono_ms() + c->attempt_ms),
                             &etcdserverpb__status_response__descriptor, &code,
                             msg, sizeof(msg), &m);
    if (err == 0)
        err = etcd_status_err(code, msg);
    if (err == 0) {
        Etcdserverpb__StatusResponse *r = (void *)m;
        st->member_id = r->header != NULL ? r->header->member_id : 0;
        st->leader_id = r->leader;
        st->raft_term = r->raftterm;
        st->raft_index = r->raftindex;
        st->raft_applied_index = r->raftappliedindex;
        st->db_size = r->dbsize;
        st->db_size_in_use = r->dbsizeinuse;
        st->is_learner = r->islearner;
        snprintf(st->version, sizeof(st->version), "%s",
                 r->version != NULL ? r->version : "");
    }
    st->err = err;
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    if (bb != NULL)
        grpc_byte_buffer_destroy(bb);
    grpc_channel_destroy(ch);
}

int etcd_status(etcd_client *c, struct etcd_member_status *ret, size_t cap,
                size_t *ret_n) {
    if (c == NULL || (ret == NULL && cap > 0) || ret_n == NULL)
        return DETD_EINVAL;
    char *token = NULL;
    uint64_t gen;
    /* Status needs no credentials; a token is sent when one is at hand. */
    if (etcd_auth_token(c, clock_mono_ms() + c->attempt_ms, 0, &token, &gen) !=
        0)
        token = NULL;
    size_t n = c->n_endpoints < cap ? c->n_endpoints : cap;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load(&c->cancelled)) { /* stopping: no more members */
            n = i;
            break;
        }
        status_one(c, i, token, &ret[i]);
    }
    free(token);
    *ret_n = n;
    return 0;
}
