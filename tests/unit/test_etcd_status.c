/*
 * etcd_status_err: a gRPC status from etcd becomes the DETD_E* code the
 * retry loop acts on. A server-side deadline (etcd 3.4 sends it as UNKNOWN
 * "context deadline exceeded") is a timeout, retried like the client's
 * own; an UNKNOWN status with any other text stays a protocol error.
 */
#define _GNU_SOURCE
#include "cluster/etcd_int.h"

#include "detd/error.h"
#include "runner.h"

TEST(deadline_either_side_is_a_timeout) {
    CHECK_EQ_INT(
        etcd_status_err(GRPC_STATUS_DEADLINE_EXCEEDED, "Deadline Exceeded"),
        DETD_ETIMEDOUT);
    CHECK_EQ_INT(
        etcd_status_err(GRPC_STATUS_UNKNOWN, "context deadline exceeded"),
        DETD_ETIMEDOUT);
}

TEST(unknown_otherwise_is_a_protocol_error) {
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_UNKNOWN, "something else"),
                 DETD_EPROTO);
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_UNKNOWN, ""), DETD_EPROTO);
}

TEST(etcd_codes) {
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_OK, ""), 0);
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_UNAVAILABLE,
                                 "etcdserver: request timed out"),
                 DETD_EUNAVAILABLE);
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_OUT_OF_RANGE,
                                 "etcdserver: mvcc: required revision has "
                                 "been compacted"),
                 DETD_ESTALE);
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_INVALID_ARGUMENT,
                                 "etcdserver: authentication failed, invalid "
                                 "user ID or password"),
                 DETD_EDENIED);
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_INVALID_ARGUMENT,
                                 "etcdserver: request is too large"),
                 DETD_ELIMIT);
    CHECK_EQ_INT(etcd_status_err(GRPC_STATUS_RESOURCE_EXHAUSTED,
                                 "etcdserver: too many requests"),
                 DETD_EBUSY);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
