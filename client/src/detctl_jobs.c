/* detctl_jobs: the job a command checks (see detctl_jobs.h). */
#define _GNU_SOURCE
#include "detctl_jobs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where the launcher names its job, in the Python client's order. */
static const char *const job_vars[] = {"DETD_JOB", "TORCHELASTIC_RUN_ID",
                                       "SLURM_JOB_ID", "PMIX_NAMESPACE",
                                       "OMPI_MCA_orte_ess_jobid"};

static const char *label_of(const Detd__V1__Observation *x) {
    return x->client != NULL && x->client->job != NULL ? x->client->job : "";
}

static int newest_first(const void *pa, const void *pb) {
    const struct detctl_job *a = pa, *b = pb;
    if (a->last_ms != b->last_ms)
        return a->last_ms > b->last_ms ? -1 : 1;
    return strcmp(a->job, b->job);
}

/* See detctl_jobs.h. */
int detctl_jobs_pick(const struct detctl_opts *o,
                     Detd__V1__ListObservationsResponse *const *pages,
                     size_t n_pages, struct detctl_jobs *ret) {
    memset(ret, 0, sizeof(*ret));
    size_t cap = 0;
    for (size_t p = 0; p < n_pages; p++)
        for (size_t i = 0; i < pages[p]->n_observations; i++) {
            const Detd__V1__Observation *x = pages[p]->observations[i];
            const char *l = label_of(x);
            size_t k = 0;
            while (k < ret->n && strcmp(ret->v[k].job, l) != 0)
                k++;
            if (k == ret->n) {
                if (ret->n == cap) {
                    size_t nc = cap ? 2 * cap : 8;
                    struct detctl_job *nv = realloc(ret->v, nc * sizeof(*nv));
                    if (nv == NULL)
                        return -1;
                    ret->v = nv;
                    cap = nc;
                }
                ret->v[ret->n++] = (struct detctl_job){l, 0, x->at_ms, -1};
            }
            ret->v[k].observations++;
            if (x->at_ms > ret->v[k].last_ms)
                ret->v[k].last_ms = x->at_ms;
            /* Written by a process of this user (as the daemon saw it). */
            if (x->peer != NULL && x->peer->uid == (int64_t)getuid() &&
                x->at_ms > ret->v[k].mine_ms)
                ret->v[k].mine_ms = x->at_ms;
        }
    if (ret->n > 1)
        qsort(ret->v, ret->n, sizeof(*ret->v), newest_first);
    if (o->job != NULL) {
        ret->pick = o->job;
        ret->src = "--job";
    } else if (o->all_jobs || o->cluster) {
        ret->src = o->all_jobs ? "--all-jobs" : "--cluster";
    } else {
        for (size_t i = 0; i < sizeof job_vars / sizeof job_vars[0]; i++) {
            const char *e = getenv(job_vars[i]);
            if (e != NULL && e[0] != '\0') {
                ret->pick = e;
                ret->src = job_vars[i];
                return 0;
            }
        }
        if (ret->n == 0) {
            ret->src = "none";
        } else if (ret->n == 1) {
            ret->src = "only"; /* every observation: no pick */
        } else {
            /* The job this user's processes observed last, when there is
             * one: another user's later observation (another label) does
             * not choose what this user's verify checks. */
            size_t best = 0;
            for (size_t i = 1; i < ret->n; i++)
                if (ret->v[i].mine_ms > ret->v[best].mine_ms)
                    best = i;
            ret->pick = ret->v[best].job;
            ret->src = ret->v[best].mine_ms >= 0 ? "latest-mine" : "latest";
        }
    }
    return 0;
}

/* See detctl_jobs.h. */
void detctl_jobs_clear(struct detctl_jobs *j) {
    free(j->v);
    j->v = NULL;
    j->n = 0;
}

/* See detctl_jobs.h. */
int detctl_jobs_match(const struct detctl_jobs *j,
                      const Detd__V1__Observation *x) {
    return j->pick == NULL || strcmp(label_of(x), j->pick) == 0;
}

/* See detctl_jobs.h. */
void detctl_jobs_json(const struct detctl_jobs *j, json_t *doc) {
    const char *job = j->pick;
    if (job == NULL && strcmp(j->src, "only") == 0)
        job = j->v[0].job;
    json_object_set_new(doc, "job", job ? json_string(job) : json_null());
    json_object_set_new(doc, "job_source", json_string(j->src));
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < j->n; i++)
        json_array_append_new(
            a, json_pack("{s:s, s:I, s:o}", "job", j->v[i].job, "observations",
                         (json_int_t)j->v[i].observations, "last_observed_at",
                         detctl_cli_json_time(j->v[i].last_ms)));
    json_object_set_new(doc, "jobs", a ? a : json_array());
}

static const char *shown(const char *job) {
    return job[0] != '\0' ? job : "(no job label)";
}

/* See detctl_jobs.h. */
void detctl_jobs_print_line(const json_t *doc) {
    const char *job = json_string_value(json_object_get(doc, "job"));
    const char *src = json_string_value(json_object_get(doc, "job_source"));
    size_t n = json_array_size(json_object_get(doc, "jobs"));
    if (src == NULL)
        return;
    if (strcmp(src, "--job") == 0)
        printf("job: %s (--job)\n", shown(job));
    else if (strcmp(src, "latest") == 0 || strcmp(src, "latest-mine") == 0)
        printf("job: %s (observed last%s, of %zu jobs; --job J for another, "
               "--all-jobs for every job)\n",
               shown(job),
               strcmp(src, "latest-mine") == 0 ? " by this user's processes"
                                               : "",
               n);
    else if (strcmp(src, "only") == 0)
        printf("job: %s (the only job observed)\n", shown(job));
    else if (strcmp(src, "none") == 0)
        printf("job: every job (nothing observed)\n");
    else if (strcmp(src, "--all-jobs") == 0 || strcmp(src, "--cluster") == 0)
        printf("job: every job (%s; %zu observed)\n", src, n);
    else
        printf("job: %s (the launcher's, $%s; --all-jobs for every job)\n",
               shown(job), src);
}

/* See detctl_jobs.h. */
void detctl_jobs_print_hint(const json_t *doc) {
    const json_t *jobs = json_object_get(doc, "jobs");
    const char *job = json_string_value(json_object_get(doc, "job"));
    const char *src = json_string_value(json_object_get(doc, "job_source"));
    size_t n = json_array_size(jobs), i;
    json_t *e;
    char others[512] = "";
    size_t len = 0, shown_n = 0;
    json_array_foreach(jobs, i, e) {
        const char *l = json_string_value(json_object_get(e, "job"));
        int picked =
            job != NULL && strcmp(src, "only") != 0 && strcmp(l, job) == 0;
        if (picked || len >= sizeof others - 1)
            continue;
        if (shown_n == 5) {
            len += (size_t)snprintf(others + len, sizeof others - len, ", ...");
            break;
        }
        len += (size_t)snprintf(
            others + len, sizeof others - len, "%s%s (%lld observations)",
            shown_n ? ", " : "", shown(l),
            (long long)json_integer_value(json_object_get(e, "observations")));
        shown_n++;
    }
    if (len >= sizeof others)
        len = sizeof others - 1;
    if (job != NULL && strcmp(src, "only") != 0 && shown_n > 0)
        printf("hint: checked job %s only; other jobs observed: %s. "
               "'detctl verify --job J' checks another, --all-jobs every "
               "job\n",
               shown(job), others);
    else if (job == NULL && n > 1)
        printf("hint: these observations are of %zu jobs: %s. "
               "'detctl verify --job J' checks one job's\n",
               n, others);
    else
        printf("hint: 'detctl verify --job J' checks one job's observations "
               "(a process's job label: $DETD_JOB, else the launcher's run "
               "id)\n");
    printf("hint: once the cause is fixed, 'detctl reset --kernel K' (or "
           "--all) forgets the decisions and observations of earlier runs\n");
}
