/*
 * detd error codes.
 *
 * Every detd function returns 0 on success or a negative DETD_E* code.
 * System errors are returned as -errno where no detd code fits.
 */
#ifndef DETD_ERROR_H
#define DETD_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message). Values are stable ABI: append only. */
#define DETD_ERRNO_MAP(X)                                                      \
    X(EINVAL, -1000, "invalid argument")                                       \
    X(ENOMEM, -1001, "out of memory")                                          \
    X(ECONNECT, -1002, "cannot reach the detd daemon")                         \
    X(ETIMEDOUT, -1003, "deadline exceeded")                                   \
    X(ELIMIT, -1004, "a size or count limit was exceeded")                     \
    X(EBUSY, -1005, "resource exhausted")                                      \
    X(ENOTFOUND, -1006, "not found")                                           \
    X(ESTALE, -1007, "claim no longer held")                                   \
    X(EPROTO, -1008, "protocol error")                                         \
    X(EUNIMPL, -1009, "not implemented by the daemon")                         \
    X(EDENIED, -1010, "permission denied")                                     \
    X(ESTORE, -1011, "store error")                                            \
    X(EINTERNAL, -1012, "internal error")                                      \
    X(ECANCELLED, -1013, "cancelled")                                          \
    X(EUNAVAILABLE, -1014, "daemon unavailable")                               \
    X(ECORRUPT, -1015, "corrupt data")                                         \
    X(EEXIST, -1016, "already exists")                                         \
    X(ENOCAND, -1017, "no candidate has a valid timing")                       \
    X(EFORK, -1018, "handle used across fork")                                 \
    X(EENV, -1019, "the timing pass could not run in a process's environment")

typedef enum detd_errno {
#define DETD_ERR_ENUM_(name, value, msg) DETD_##name = (value),
    DETD_ERRNO_MAP(DETD_ERR_ENUM_)
#undef DETD_ERR_ENUM_
} detd_errno;

/*
 * Return a static, human-readable message for a detd code or -errno.
 * Never returns NULL.
 */
const char *detd_strerror(int err);

/*
 * Return the symbolic name ("DETD_ETIMEDOUT", "ENOENT", ...) of a code.
 * Never returns NULL.
 */
const char *detd_err_name(int err);

#ifdef __cplusplus
}
#endif

#endif /* DETD_ERROR_H */
