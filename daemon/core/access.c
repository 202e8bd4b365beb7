/*
 * access: the unix socket's access policy (see access.h).
 */
#define _GNU_SOURCE
#include "core/access.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "detd/error.h"

static int parse_id(const char *s, unsigned *ret) {
    char *end = NULL;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    /* (uid_t)-1 means "no id" to the kernel: never accept it. */
    if (errno != 0 || end == s || *end != '\0' || s[0] == '-' ||
        v >= 0xffffffffUL)
        return -1;
    *ret = (unsigned)v;
    return 0;
}

int access_ids_add(struct access_ids *ids, const char *s, int is_group,
                   const char **ret_why) {
    unsigned id;
    char buf[16384];
    if (ids == NULL || s == NULL || s[0] == '\0') {
        *ret_why = "empty value";
        return DETD_EINVAL;
    }
    if (s[0] >= '0' && s[0] <= '9') {
        if (parse_id(s, &id) != 0) {
            *ret_why = is_group ? "not a group id" : "not a user id";
            return DETD_EINVAL;
        }
    } else if (is_group) {
        struct group gr, *res = NULL;
        if (getgrnam_r(s, &gr, buf, sizeof(buf), &res) != 0 || res == NULL) {
            *ret_why = "no such group";
            return DETD_EINVAL;
        }
        id = (unsigned)gr.gr_gid;
    } else {
        struct passwd pw, *res = NULL;
        if (getpwnam_r(s, &pw, buf, sizeof(buf), &res) != 0 || res == NULL) {
            *ret_why = "no such user";
            return DETD_EINVAL;
        }
        id = (unsigned)pw.pw_uid;
    }
    if (ids->n == ACCESS_MAX_IDS) {
        *ret_why = "too many ids (at most 256 per list)";
        return DETD_ELIMIT;
    }
    ids->ids[ids->n++] = id;
    return 0;
}

static int has(const struct access_ids *ids, unsigned id) {
    for (size_t i = 0; i < ids->n; i++)
        if (ids->ids[i] == id)
            return 1;
    return 0;
}

/* Is the caller in the uid list or a member of a group of the gid list? */
static int matches(const struct access_ids *uids, const struct access_ids *gids,
                   const struct access_cred *c) {
    if (has(uids, (unsigned)c->uid) || has(gids, (unsigned)c->gid))
        return 1;
    for (size_t i = 0; i < c->n_groups && c->groups != NULL; i++)
        if (has(gids, (unsigned)c->groups[i]))
            return 1;
    return 0;
}

int access_restricted(const struct access_policy *p) {
    return p->allow_uid.n > 0 || p->allow_gid.n > 0;
}

access_reason access_check(const struct access_policy *p,
                           const struct access_cred *c, int admin, char *why,
                           size_t why_len) {
    if (p == NULL)
        return ACCESS_OK;
    int any_admin = p->admin_uid.n > 0 || p->admin_gid.n > 0;
    if (!access_restricted(p) && !(admin && any_admin))
        return ACCESS_OK;
    if (c == NULL) {
        if (why_len > 0)
            snprintf(why, why_len,
                     "the caller's credentials (SO_PEERCRED) are unknown");
        return ACCESS_DENIED_NOCRED;
    }
    if (access_restricted(p) && !matches(&p->allow_uid, &p->allow_gid, c)) {
        if (why_len > 0)
            snprintf(why, why_len,
                     "uid %u (gid %u) is not in --allow-uid/--allow-gid",
                     (unsigned)c->uid, (unsigned)c->gid);
        return ACCESS_DENIED_ALLOW;
    }
    if (admin && any_admin && !matches(&p->admin_uid, &p->admin_gid, c)) {
        if (why_len > 0)
            snprintf(why, why_len,
                     "uid %u (gid %u) is not in --admin-uid/--admin-gid: "
                     "this call changes state",
                     (unsigned)c->uid, (unsigned)c->gid);
        return ACCESS_DENIED_ADMIN;
    }
    return ACCESS_OK;
}

const char *access_reason_label(access_reason r) {
    switch (r) {
    case ACCESS_DENIED_ALLOW:
        return "allow_list";
    case ACCESS_DENIED_ADMIN:
        return "admin_list";
    case ACCESS_DENIED_NOCRED:
        return "no_credentials";
    default:
        return "ok";
    }
}
