/*
 * detctl_jobs: which job's observations a command checks (verify, lock
 * export). The job labels observed in a namespace (ClientIdentity.job,
 * "" for a process that attached with none), newest first, and the pick:
 * --job J; else --all-jobs (and verify --cluster): every job; else the
 * launcher's job when detctl runs inside one ($DETD_JOB, then the
 * launcher's run id: $TORCHELASTIC_RUN_ID, $SLURM_JOB_ID,
 * $PMIX_NAMESPACE, $OMPI_MCA_orte_ess_jobid: the order the Python client
 * labels its processes in); else the job this user's processes (their
 * uid as the daemon saw it) observed last, or with none of theirs the job
 * observed last. A pick of the only job observed is every observation.
 */
#ifndef DETD_DETCTL_JOBS_H
#define DETD_DETCTL_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "detctl_cli.h"
#include "detd.pb-c.h"

/* One job label observed. */
struct detctl_job {
    const char *job; /* borrowed from the observations ("": no label) */
    uint64_t observations;
    int64_t last_ms; /* its newest observation, unix ms */
    int64_t mine_ms; /* its newest written by this user's uid (-1: none) */
};

/* The labels observed, newest first, and the pick. */
struct detctl_jobs {
    struct detctl_job *v;
    size_t n;
    const char *pick; /* NULL: every job; else the label checked */
    const char *src;  /* why: "--job", "--all-jobs", "--cluster", an
                         environment variable's name, "latest-mine",
                         "latest", "only", "none" */
};

/*
 * Collect the labels of the observations in pages[0..n_pages) and pick
 * one as o says (see above). *ret (zeroed first) borrows from the pages;
 * detctl_jobs_clear() frees it. Returns 0 or -1 (out of memory).
 */
int detctl_jobs_pick(const struct detctl_opts *o,
                     Detd__V1__ListObservationsResponse *const *pages,
                     size_t n_pages, struct detctl_jobs *ret);
void detctl_jobs_clear(struct detctl_jobs *j);

/* 1 when observation x is of the picked job (always with no pick). */
int detctl_jobs_match(const struct detctl_jobs *j,
                      const Detd__V1__Observation *x);

/* Set doc's "job", "job_source" and "jobs" (docs/detctl-json.md). */
void detctl_jobs_json(const struct detctl_jobs *j, json_t *doc);

/* The text view's first line, from a document detctl_jobs_json() filled
 * ("job: J (why)"). */
void detctl_jobs_print_line(const json_t *doc);

/* After a FAIL: how to check another job, or every job, and how a reset
 * forgets earlier runs (from the document). */
void detctl_jobs_print_hint(const json_t *doc);

#endif /* DETD_DETCTL_JOBS_H */
