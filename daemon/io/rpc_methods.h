/*
 * rpc_methods: the one list of the daemon's RPC methods.
 *
 * Each row: X(NAME, path, request descriptor, streaming, admin, handler)
 *   NAME        the rpc_method enumerator is RPC_<NAME> (rpc.h);
 *   path        the gRPC method path;
 *   descriptor  the protobuf-c descriptor of its request;
 *   streaming   1 for a server stream (Attach), else a unary call;
 *   admin       1 when the call changes state an operator owns: checked
 *               against --admin-uid/--admin-gid (access.h);
 *   handler     the loop-thread function that answers it (dispatch.c):
 *               void handler(struct daemon *, struct rpc_event *), which
 *               consumes the event.
 * The rpc server (the paths it registers and their request types), the
 * access check, the per-method metrics and the dispatch all expand this
 * list, so a new method is one row here (and its handler). The order is
 * free: nothing depends on an enumerator's value.
 */
#ifndef DETD_RPC_METHODS_H
#define DETD_RPC_METHODS_H

/* clang-format off */
#define RPC_METHODS(X)                                                         \
    X(ATTACH, "/detd.v1.Decider/Attach",                                       \
      detd__v1__attach_request__descriptor, 1, 0, decide_attach)               \
    X(DECIDE, "/detd.v1.Decider/Decide",                                       \
      detd__v1__decide_request__descriptor, 0, 0, decide_decide)               \
    X(REPORT, "/detd.v1.Decider/Report",                                       \
      detd__v1__report_request__descriptor, 0, 0, decide_report)               \
    X(SHARE, "/detd.v1.Decider/Share",                                         \
      detd__v1__share_request__descriptor, 0, 0, benchsplit_share)             \
    X(OBSERVE, "/detd.v1.Decider/Observe",                                     \
      detd__v1__observe_request__descriptor, 0, 0, decide_observe)             \
    X(VOTE, "/detd.v1.Decider/Vote",                                           \
      detd__v1__vote_request__descriptor, 0, 0, votes_on_vote)                 \
    X(STATUS, "/detd.v1.Admin/Status",                                         \
      detd__v1__status_request__descriptor, 0, 0, admin_status)                \
    X(LIST_DECISIONS, "/detd.v1.Admin/ListDecisions",                          \
      detd__v1__list_decisions_request__descriptor, 0, 0, admin_list)          \
    X(VERIFY, "/detd.v1.Admin/Verify",                                         \
      detd__v1__verify_request__descriptor, 0, 0, admin_verify)                \
    X(RESET, "/detd.v1.Admin/Reset",                                           \
      detd__v1__reset_request__descriptor, 0, 1, admin_reset)                  \
    X(LIST_OBSERVATIONS, "/detd.v1.Admin/ListObservations",                    \
      detd__v1__list_observations_request__descriptor, 0, 0, obslist_serve)    \
    X(RELOAD, "/detd.v1.Admin/Reload",                                         \
      detd__v1__reload_request__descriptor, 0, 1, tableadmin_reload_rpc)       \
    X(EXPLAIN, "/detd.v1.Admin/Explain",                                       \
      detd__v1__explain_request__descriptor, 0, 0, tableadmin_explain)         \
    X(LIST_VOTES, "/detd.v1.Admin/ListVotes",                                  \
      detd__v1__list_votes_request__descriptor, 0, 0, votes_list)              \
    X(EXPORT_DECISIONS, "/detd.v1.Admin/ExportDecisions",                      \
      detd__v1__export_decisions_request__descriptor, 0, 0,                    \
      votes_export_decisions)                                                  \
    X(IMPORT_TABLE, "/detd.v1.Admin/ImportTable",                              \
      detd__v1__import_table_request__descriptor, 0, 1, imports_on_import)     \
    X(IMPORT_LOCK, "/detd.v1.Admin/ImportLock",                                \
      detd__v1__import_lock_request__descriptor, 0, 1, lock_import)            \
    X(HEALTH, "/grpc.health.v1.Health/Check",                                  \
      grpc__health__v1__health_check_request__descriptor, 0, 0, admin_health)
/* clang-format on */

#endif /* DETD_RPC_METHODS_H */
