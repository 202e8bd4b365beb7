/*
 * access: who may use the node's unix socket. Pure policy: lists of user
 * and group ids, parsed from flags (names or numbers), and the check of
 * a caller's peer credentials against them. No sockets here; the
 * credentials come from SO_PEERCRED (listener.c, rpc.c).
 *
 * Rules:
 * - allow lists empty: anyone who can open the socket (its mode and
 *   group decide) may call; otherwise the caller's uid must be in
 *   --allow-uid or one of its groups (primary or supplementary) in
 *   --allow-gid.
 * - admin lists empty: state-changing admin calls (Reset) are allowed to
 *   every allowed caller; otherwise only to a uid in --admin-uid or a
 *   member of a group in --admin-gid. Root is not implicit in any list.
 */
#ifndef DETD_ACCESS_H
#define DETD_ACCESS_H

#include <stddef.h>
#include <sys/types.h>

/* Most ids one list may hold; most supplementary groups looked at. */
#define ACCESS_MAX_IDS 256
#define ACCESS_MAX_GROUPS 256

struct access_ids {
    unsigned ids[ACCESS_MAX_IDS];
    size_t n;
};

struct access_policy {
    struct access_ids allow_uid, allow_gid;
    struct access_ids admin_uid, admin_gid;
};

/* A caller's credentials as the kernel reports them. */
struct access_cred {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    const gid_t *groups; /* supplementary groups, borrowed; may be NULL */
    size_t n_groups;
};

/* Why a caller was refused (also the label of the refusal counters). */
typedef enum access_reason {
    ACCESS_OK = 0,
    ACCESS_DENIED_ALLOW,  /* not in --allow-uid/--allow-gid */
    ACCESS_DENIED_ADMIN,  /* an admin call, not in --admin-uid/--admin-gid */
    ACCESS_DENIED_NOCRED, /* peer credentials could not be read */
    ACCESS_REASON_COUNT
} access_reason;

/*
 * Add one user (is_group 0) or group (is_group 1) given as a name or a
 * decimal id to ids. Names are looked up with getpwnam_r/getgrnam_r (the
 * only lookups in this module). Returns 0, DETD_EINVAL (unknown name, bad
 * number; *ret_why (static text) says which) or DETD_ELIMIT (list full).
 */
int access_ids_add(struct access_ids *ids, const char *s, int is_group,
                   const char **ret_why);

/* Do the allow lists restrict anyone? */
int access_restricted(const struct access_policy *p);

/*
 * Check a caller (p NULL: no policy, everyone may): admin nonzero for a
 * state-changing admin call. Returns ACCESS_OK or the reason it is refused; on
 * refusal writes a message naming the uid and the flags to why (why_len bytes,
 * may be 0).
 */
access_reason access_check(const struct access_policy *p,
                           const struct access_cred *c, int admin, char *why,
                           size_t why_len);

/* Short label of a reason ("allow_list", "admin_list", "no_credentials"). */
const char *access_reason_label(access_reason r);

#endif /* DETD_ACCESS_H */
