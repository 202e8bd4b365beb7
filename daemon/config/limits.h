/*
 * limits: the hard caps on what a client can make the daemon hold or
 * parse. Each is checked where the value enters (app/validate.c for
 * requests, options.c for settings); over a cap the caller gets an error
 * naming the field, nothing is stored, and the daemon keeps serving.
 */
#ifndef DETD_LIMITS_H
#define DETD_LIMITS_H

#define DAEMON_MAX_NAMESPACE 128
#define DAEMON_MAX_ARCH 64
#define DAEMON_MAX_KERNEL 1024
#define DAEMON_MAX_CONFIG 1024
#define DAEMON_MAX_TIMING_SAMPLES 1024
#define DAEMON_MAX_IDENTITY_STRING 256
#define DAEMON_MAX_WAIT_MS (60LL * 60 * 1000)
#define DAEMON_MAX_LIST 10000
/* An observation's error or why-ungoverned text; its audit's names. */
#define DAEMON_MAX_NOTE 1024
#define DAEMON_MAX_AUDIT_ARGS 64
/* A runtime finding's name (key.key) and detail (config): SOURCE_RUNTIME. */
#define DAEMON_MAX_RUNTIME_TEXT 256
/* Observations in one ListObservations page (and DAEMON_MAX_PAGE_BYTES). */
#define DAEMON_MAX_OBS_PAGE 1000
/* The most ListObservations bytes verify --cluster keeps from the other
 * nodes (all pages of all nodes); a node past it is named incomplete. */
#define DAEMON_MAX_VERIFY_BYTES (256 << 20)
#define DAEMON_DEFAULT_MAX_VOTES 1000000
/* Bytes of rows in one ListVotes / ExportDecisions answer (then paged). */
#define DAEMON_MAX_PAGE_BYTES (512 * 1024)
/* Splits of timing passes' benchmarks open at once (app/benchsplit.c):
 * past it, after the splits of ended passes are dropped, a holder's
 * opening Share is refused. */
#define DAEMON_MAX_BENCH_SPLITS 256
/* Helpers of one split; past it, a waiter gets a compile share. */
#define DAEMON_MAX_BENCH_HELPERS 16
/* Samples one split holds (given timings and reference samples): what the
 * holder collects must fit in one answer and its one Report. */
#define DAEMON_MAX_BENCH_SAMPLES 65536

#endif /* DETD_LIMITS_H */
