/*
 * exporter: collect the daemon's metrics on the loop thread (see
 * exporter.h for the hand-over to the HTTP thread).
 */
#define _GNU_SOURCE
#include "ops/exporter.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster/cluster.h"
#include "app/coord.h"
#include "app/daemon.h"
#include "app/waiters.h"
#include "clock.h"
#include "detd/client.h"
#include "detd/error.h"

/* DETD_API_VERSION as a label value. */
#define DETD_STRINGIFY_(x) #x
#define DETD_STRINGIFY(x) DETD_STRINGIFY_(x)
#include "core/metrics.h"
#include "io/listener.h"
#include "io/metrics_http.h"

struct exporter {
    uv_async_t async;
    struct daemon *d;
    metrics_http *http;
    pthread_mutex_t mu; /* guards everything below */
    pthread_cond_t cond;
    uint64_t asked, answered; /* scrape generations */
    char *text;               /* the answer to generation `answered` */
    size_t len;
    int rc;
};

static void counter(struct metrics_buf *b, const char *name, const char *help,
                    uint64_t v) {
    metrics_family(b, name, "counter", help);
    metrics_sample(b, name, NULL, (double)v);
}

static void gauge(struct metrics_buf *b, const char *name, const char *help,
                  double v) {
    metrics_family(b, name, "gauge", help);
    metrics_sample(b, name, NULL, v);
}

int exporter_render(struct daemon *d, char **ret_text, size_t *ret_len) {
    struct metrics_buf b;
    metrics_buf_init(&b);
    const struct daemon_counters *c = &d->counters;

    metrics_family(&b, "detd_build_info", "gauge",
                   "Always 1; the labels name the build serving.");
    {
        const char *l[] = {"version", DETD_VERSION, "api_version",
                           DETD_STRINGIFY(DETD_API_VERSION), NULL};
        metrics_sample(&b, "detd_build_info", l, 1);
    }
    gauge(&b, "detd_start_time_seconds",
          "Start time of the daemon since the Unix epoch, in seconds.",
          (double)d->started_unix_ms / 1000.0);
    metrics_family(&b, "detd_decisions_total", "counter",
                   "Decisions committed by this daemon, by source.");
    static const struct {
        const char *label;
        int source;
    } sources[] = {{"timed", DETD_SOURCE_TIMED},
                   {"table", DETD_SOURCE_TABLE},
                   {"import", DETD_SOURCE_IMPORT}};
    for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
        const char *l[] = {"source", sources[i].label, NULL};
        metrics_sample(&b, "detd_decisions_total", l,
                       (double)c->committed[sources[i].source & 7]);
    }
    uint64_t total = 0;
    store_count_decisions(d->store, d->cfg->ns, &total, NULL);
    gauge(&b, "detd_store_decisions",
          "Decisions in the local store for this namespace.", (double)total);

    uint64_t fast = atomic_load(&d->fast_decide_hits);
    counter(&b, "detd_decide_calls_total", "Decide calls served.",
            c->decide_calls + fast);
    metrics_family(&b, "detd_decide_lookups_total", "counter",
                   "Decide calls answered from a decision (hit) or finding "
                   "none (miss).");
    {
        const char *hit[] = {"result", "hit", NULL};
        const char *miss[] = {"result", "miss", NULL};
        metrics_sample(&b, "detd_decide_lookups_total", hit,
                       (double)(c->decide_hits + fast));
        metrics_sample(&b, "detd_decide_lookups_total", miss,
                       (double)c->decide_misses);
    }
    metrics_family(&b, "detd_table_lookups_total", "counter",
                   "Table lookups for undecided keys: hit, miss, or stale (an "
                   "entry naming no live candidate).");
    {
        const char *hit[] = {"result", "hit", NULL};
        const char *miss[] = {"result", "miss", NULL};
        const char *stale[] = {"result", "stale", NULL};
        metrics_sample(&b, "detd_table_lookups_total", hit,
                       (double)c->table_hits);
        metrics_sample(&b, "detd_table_lookups_total", miss,
                       (double)c->table_misses);
        metrics_sample(&b, "detd_table_lookups_total", stale,
                       (double)c->table_stale);
    }
    counter(&b, "detd_lock_skipped_total",
            "Lock entries not imported because their provenance did not "
            "match the importing run (a miss: detctl explain says why).",
            c->lock_skipped);
    counter(&b, "detd_lock_not_committed_total",
            "Lock entries etcd did not take (unreachable by the import's "
            "deadline): that import failed, naming them.",
            c->lock_not_committed);
    counter(&b, "detd_lock_registry_late_total",
            "detd --lock imports through etcd that chose the lock's owner "
            "before the registry listed this node (it did not within its "
            "bound): more than one node may have written the lock.",
            c->lock_registry_late);
    gauge(&b, "detd_table_files_skipped",
          "Table files of the set in use that failed to load (listed by "
          "detctl status and detctl reload).",
          (double)tables_n_errors(d->tables));
    metrics_family(&b, "detd_limit_refusals_total", "counter",
                   "Calls refused over a per-session or per-uid cap, by the "
                   "setting that sets it.");
    for (int i = 0; i < FAIR_CAP_COUNT; i++) {
        const char *l[] = {"limit", fair_cap_key((fair_cap)i), NULL};
        metrics_sample(&b, "detd_limit_refusals_total", l,
                       (double)c->fair_refused[i]);
    }
    metrics_family(&b, "detd_store_write_failures_total", "counter",
                   "Store calls that failed on the disk (answered "
                   "UNAVAILABLE), by cause: disk_full or disk_error.");
    {
        const char *full[] = {"cause", "disk_full", NULL};
        const char *err[] = {"cause", "disk_error", NULL};
        metrics_sample(&b, "detd_store_write_failures_total", full,
                       (double)c->store_disk_full);
        metrics_sample(&b, "detd_store_write_failures_total", err,
                       (double)c->store_disk_errors);
    }
    counter(&b, "detd_table_reload_failures_total",
            "Table reloads that failed as a whole (the previous set stayed "
            "in use).",
            c->table_reload_failures);
    counter(&b, "detd_failed_passes_total",
            "Timing passes in which every candidate failed (recorded: the key "
            "is not timed again until its code changes or a reset).",
            c->failed_passes);
    counter(&b, "detd_passes_env_released_total",
            "Timing passes given back because they could not run in the "
            "timing process's environment (an import, no driver): nothing "
            "stored, the key is timed again.",
            c->passes_env_released);
    counter(&b, "detd_passes_passed_on_total",
            "Claims their holder passed on before timing anything (it asked "
            "early and did not need the pass): to the oldest waiter, or "
            "dropped.",
            c->passes_passed_on);
    counter(&b, "detd_failed_pass_answers_total",
            "Decide calls answered with a recorded failed pass.",
            c->failed_pass_answers);
    counter(&b, "detd_timing_passes_total",
            "Timing passes: a rank was told to time the candidates of a key "
            "(a holder asking again under its claim is the same pass).",
            c->designations);
    counter(&b, "detd_takeovers_total",
            "Designations that took a key over from a rank that went away or "
            "whose lease expired.",
            c->takeovers);
    counter(&b, "detd_waits_total",
            "Decide calls held while another rank timed the key.", c->waits);
    counter(&b, "detd_wait_timeouts_total",
            "Held Decide calls that reached their deadline.", c->wait_timeouts);
    counter(&b, "detd_pass_shares_total",
            "Shares of timing passes given to waiting ranks (compile help).",
            c->shares);
    counter(&b, "detd_bench_splits_total",
            "Timing passes whose benchmarks were split across the node's "
            "GPUs (Share).",
            c->bench_splits);
    counter(&b, "detd_bench_helpers_total",
            "Waiting ranks admitted to benchmark a share of a pass on a GPU "
            "of their own.",
            c->bench_helpers);
    counter(&b, "detd_bench_given_total",
            "Candidate timings given by helpers to the timing rank.",
            c->bench_given);
    counter(&b, "detd_bench_reclaimed_total",
            "Candidates the timing rank took back from a late helper.",
            c->bench_reclaimed);
    metrics_family(&b, "detd_wait_duration_seconds", "histogram",
                   "How long held Decide calls waited, in seconds.");
    metrics_histogram(&b, "detd_wait_duration_seconds", NULL,
                      waiters_hist(d->waiters));
    counter(&b, "detd_reports_total", "Report calls.", c->reports);
    counter(&b, "detd_reports_stale_total",
            "Reports for a claim no longer held.", c->reports_stale);
    counter(&b, "detd_observes_total", "Observe calls.", c->observes);
    counter(&b, "detd_rejected_total",
            "Calls refused as invalid or over a limit.", c->rejected);
    counter(&b, "detd_busy_total", "Calls refused for capacity.", c->busy);
    counter(&b, "detd_verify_divergences_total",
            "Divergent keys found by verify calls.", c->verify_divergences);

    metrics_family(&b, "detd_refused_calls_total", "counter",
                   "Calls on the unix socket refused by the access policy, "
                   "by reason.");
    for (int r = 1; r < ACCESS_REASON_COUNT; r++) {
        const char *l[] = {"reason", access_reason_label((access_reason)r),
                           NULL};
        metrics_sample(&b, "detd_refused_calls_total", l,
                       (double)atomic_load(&d->refused[r]));
    }
    counter(&b, "detd_refused_connections_total",
            "Connections from callers outside --allow-uid/--allow-gid.",
            d->refused_connections);

    struct conns_stats conn_st;
    struct listener_stats ls;
    rpc_server_conn_stats(d->rpc, &conn_st);
    listener_get_stats(d->listener, &ls);
    gauge(&b, "detd_connections", "Open connections on the unix socket.",
          (double)conn_st.open);
    metrics_family(&b, "detd_connections_refused_total", "counter",
                   "Connections on the unix socket closed at once, by "
                   "reason: max_connections, max_connections_per_uid, "
                   "no_descriptors.");
    {
        const char *max[] = {"reason", "max_connections", NULL};
        const char *nofd[] = {"reason", "no_descriptors", NULL};
        const char *uid[] = {"reason", "max_connections_per_uid", NULL};
        metrics_sample(&b, "detd_connections_refused_total", max,
                       (double)conn_st.refused_max);
        metrics_sample(&b, "detd_connections_refused_total", uid,
                       (double)conn_st.refused_uid);
        metrics_sample(&b, "detd_connections_refused_total", nofd,
                       (double)(conn_st.refused_no_fd + ls.dropped));
    }
    counter(&b, "detd_connections_idle_closed_total",
            "Connections closed for making no call within --idle-timeout-ms.",
            conn_st.idle_closed);
    counter(&b, "detd_accept_fd_exhausted_total",
            "Episodes of accept failing for want of file descriptors.",
            ls.fd_exhausted);

    metrics_family(&b, "detd_request_duration_seconds", "histogram",
                   "Latency of unary calls, arrival to status, by method, in "
                   "seconds.");
    for (int m = 0; m < RPC_METHOD_COUNT; m++) {
        if (rpc_method_streaming((rpc_method)m))
            continue;
        struct metrics_hist h;
        rpc_server_latency(d->rpc, (rpc_method)m, &h);
        const char *l[] = {"method", rpc_method_name((rpc_method)m), NULL};
        metrics_histogram(&b, "detd_request_duration_seconds", l, &h);
    }

    struct engine_stats es;
    engine_get_stats(d->engine, &es);
    gauge(&b, "detd_clients_attached", "Client processes attached.",
          (double)d->nsessions);
    gauge(&b, "detd_open_claims", "Keys being timed now.", (double)es.claims);
    gauge(&b, "detd_waiters", "Decide calls held now.", (double)es.waiters);
    gauge(&b, "detd_draining", "1 while the daemon drains.",
          d->draining ? 1 : 0);

    if (d->cluster != NULL) {
        struct cluster_status *cs = malloc(sizeof(*cs));
        if (cs != NULL) {
            cluster_get_status(d->cluster, cs);
            metrics_family(&b, "detd_etcd_endpoint_up", "gauge",
                           "1 when the etcd endpoint answered its last status "
                           "check with a leader.");
            for (size_t i = 0; i < cs->n_members; i++) {
                const struct etcd_member_status *m = &cs->members[i];
                const char *l[] = {"endpoint", m->endpoint, NULL};
                metrics_sample(&b, "detd_etcd_endpoint_up", l,
                               m->err == 0 && m->leader_id != 0 ? 1 : 0);
            }
            gauge(&b, "detd_etcd_connected",
                  "1 when the last etcd call or watch state succeeded.",
                  cs->connected ? 1 : 0);
            metrics_family(&b, "detd_etcd_boot_retries_total", "counter",
                           "Failed attempts to grant the node lease, register "
                           "the node or read the decisions, each followed by "
                           "a jittered backoff.");
            metrics_sample(&b, "detd_etcd_boot_retries_total", NULL,
                           (double)cs->boot_retries);
            free(cs);
        }
        gauge(&b, "detd_etcd_last_applied_revision",
              "The last etcd revision applied to the local store.",
              (double)coord_revision(d->coord));
    }
    return metrics_buf_take(&b, ret_text, ret_len);
}

/* Loop thread: a scrape is waiting. */
static void on_async(uv_async_t *h) {
    exporter *e = h->data;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->asked;
    pthread_mutex_unlock(&e->mu);
    if (gen == e->answered)
        return;
    char *text = NULL;
    size_t len = 0;
    int rc = exporter_render(e->d, &text, &len);
    pthread_mutex_lock(&e->mu);
    free(e->text); /* an answer nobody took (the scrape timed out) */
    e->text = text;
    e->len = len;
    e->rc = rc;
    e->answered = gen;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
}

/* HTTP thread. */
static int render_cb(void *ctx, char **ret_text, size_t *ret_len) {
    exporter *e = ctx;
    struct timespec until = clock_after(EXPORTER_WAIT_MS);
    pthread_mutex_lock(&e->mu);
    uint64_t gen = ++e->asked;
    uv_async_send(&e->async);
    int rc = 0;
    while (e->answered < gen && rc == 0)
        rc = pthread_cond_timedwait(&e->cond, &e->mu, &until);
    if (e->answered < gen) {
        pthread_mutex_unlock(&e->mu);
        return DETD_ETIMEDOUT;
    }
    rc = e->rc;
    if (rc == 0) {
        *ret_text = e->text;
        *ret_len = e->len;
        e->text = NULL;
    }
    pthread_mutex_unlock(&e->mu);
    return rc;
}

/* HTTP thread: d->draining is an int written by the loop; a stale read
 * only delays the 503 by one probe. */
static int serving_cb(void *ctx) {
    exporter *e = ctx;
    return !__atomic_load_n(&e->d->draining, __ATOMIC_RELAXED);
}

int exporter_open(struct daemon *d, const char *addr, exporter **ret,
                  char **ret_errmsg) {
    exporter *e = calloc(1, sizeof(*e));
    if (e == NULL)
        return DETD_ENOMEM;
    e->d = d;
    pthread_mutex_init(&e->mu, NULL);
    clock_cond_init(&e->cond); /* render_cb()'s timed wait */
    uv_async_init(&d->loop, &e->async, on_async);
    e->async.data = e;
    int rc = metrics_http_start(addr, render_cb, serving_cb, e, &e->http,
                                ret_errmsg);
    if (rc != 0) {
        exporter_close(e);
        return rc;
    }
    *ret = e;
    return 0;
}

static void on_closed(uv_handle_t *h) {
    exporter *e = h->data;
    free(e->text);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cond);
    free(e);
}

void exporter_close(exporter *e) {
    if (e == NULL)
        return;
    /* The HTTP thread is gone once this returns: nothing waits on us. */
    metrics_http_stop(e->http);
    e->http = NULL;
    uv_close((uv_handle_t *)&e->async, on_closed);
}
