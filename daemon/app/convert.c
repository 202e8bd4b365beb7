/*
 * convert: stored decisions as detd.v1.Decision messages, and timings as
 * they are stored (see convert.h).
 */
#include "app/convert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "provfmt.h"

/* Fill p from a row (borrowing its strings). with_timings parses them. */
void convert_decision_fill(const struct decision *r, struct convert_decision *p,
                           int with_timings) {
    memset(p, 0, sizeof(*p));
    detd__v1__decision__init(&p->msg);
    detd__v1__client_identity__init(&p->by);
    p->msg.id = r->id;
    p->msg.namespace_ = r->ns;
    p->msg.arch = r->arch;
    p->msg.kernel = r->kernel;
    p->msg.key = r->key;
    p->msg.candidates_fp = r->candidates_fp;
    p->msg.config = r->config;
    p->msg.source = (Detd__V1__Source)r->source;
    p->msg.claim_id = r->claim_id;
    p->msg.triton_version = r->triton_version ? r->triton_version : "";
    p->msg.decided_at_ms = r->decided_at_ms;
    p->msg.table_file = r->table_file ? r->table_file : "";
    p->msg.n_candidates = r->n_candidates;
    p->by.host = r->by_host ? r->by_host : "";
    p->by.pid = r->by_pid;
    p->by.rank = r->by_rank;
    p->by.local_rank = r->by_local_rank;
    p->by.device_name = r->by_device ? r->by_device : "";
    p->by.arch = r->by_arch ? r->by_arch : "";
    p->by.world_size = r->by_world_size;
    p->by.job = r->by_job ? r->by_job : "";
    p->msg.decided_by = &p->by;
    detd__v1__peer_identity__init(&p->peer);
    p->peer.pid = r->by_pid;
    p->peer.uid = r->by_uid;
    p->peer.node = r->by_node ? r->by_node : "";
    p->peer.claimed_pid = r->by_claimed_pid;
    p->msg.decided_peer = &p->peer;
    if (r->timing_json != NULL && r->timing_json[0] != '\0' &&
        (p->timing_doc = json_loads(r->timing_json, 0, NULL)) != NULL &&
        provfmt_get(p->timing_doc, &p->timing))
        p->msg.timing = &p->timing;
    if (!with_timings || r->timings_json == NULL)
        return;
    p->json = json_loads(r->timings_json, 0, NULL);
    if (!json_is_array(p->json))
        return;
    size_t n = json_array_size(p->json), total = 0, i;
    json_t *t;
    json_array_foreach(p->json, i, t) total +=
        json_array_size(json_object_get(t, "ms"));
    p->timings = calloc(n ? n : 1, sizeof(*p->timings));
    p->ptrs = calloc(n ? n : 1, sizeof(*p->ptrs));
    p->samples = calloc(total ? total : 1, sizeof(*p->samples));
    if (p->timings == NULL || p->ptrs == NULL || p->samples == NULL)
        return;
    size_t used = 0;
    json_array_foreach(p->json, i, t) {
        Detd__V1__CandidateTiming *ct = &p->timings[i];
        detd__v1__candidate_timing__init(ct);
        const char *cfg = json_string_value(json_object_get(t, "config"));
        ct->config = (char *)(cfg ? cfg : "");
        ct->failed = json_is_true(json_object_get(t, "failed"));
        json_t *ms = json_object_get(t, "ms");
        ct->ms = p->samples + used;
        size_t j;
        json_t *v;
        json_array_foreach(ms, j, v) p->samples[used++] = json_number_value(v);
        ct->n_ms = json_array_size(ms);
        p->ptrs[i] = ct;
    }
    p->msg.timings = p->ptrs;
    p->msg.n_timings = n;
}

void convert_decision_clear(struct convert_decision *p) {
    free(p->timings);
    free(p->ptrs);
    free(p->samples);
    if (p->json != NULL)
        json_decref(p->json);
    if (p->timing_doc != NULL)
        json_decref(p->timing_doc);
}

/* See convert.h. */
char *convert_timings_json(Detd__V1__CandidateTiming *const *t, size_t n) {
    json_t *arr = json_array();
    if (arr == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *ms = json_array();
        for (size_t j = 0; ms != NULL && j < t[i]->n_ms; j++) {
            double v = t[i]->ms[j];
            if (json_array_append_new(ms, isfinite(v) ? json_real(v)
                                                      : json_null()) != 0) {
                json_decref(ms);
                ms = NULL;
            }
        }
        /* "o" takes ms (a NULL one fails the pack, and the append). */
        if (json_array_append_new(
                arr, json_pack("{s:s, s:o, s:b}", "config", t[i]->config, "ms",
                               ms, "failed", t[i]->failed)) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    char *s = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    return s;
}
