/*
 * Unit tests of the access policy (daemon/core/access.c): id lists from names
 * and numbers, and the check of credentials against them.
 */
#include <string.h>

#include "core/access.h"
#include "detd/error.h"
#include "runner.h"

TEST(ids_numbers_and_names) {
    struct access_ids ids = {.n = 0};
    const char *why = NULL;
    CHECK_EQ_INT(access_ids_add(&ids, "0", 0, &why), 0);
    CHECK_EQ_INT(access_ids_add(&ids, "root", 0, &why), 0);
    CHECK_EQ_INT(access_ids_add(&ids, "nogroup", 1, &why), 0);
    CHECK_EQ_INT(ids.n, 3);
    CHECK_EQ_INT(ids.ids[0], 0);
    CHECK_EQ_INT(ids.ids[1], 0);
    CHECK_EQ_INT(ids.ids[2], 65534);
}

TEST(ids_bad_values) {
    struct access_ids ids = {.n = 0};
    const char *why = NULL;
    CHECK_EQ_INT(access_ids_add(&ids, "12x", 0, &why), DETD_EINVAL);
    CHECK_STR(why, "not a user id");
    CHECK_EQ_INT(access_ids_add(&ids, "4294967295", 1, &why), DETD_EINVAL);
    CHECK_STR(why, "not a group id");
    CHECK_EQ_INT(access_ids_add(&ids, "-1", 0, &why), DETD_EINVAL);
    CHECK_EQ_INT(access_ids_add(&ids, "no-such-user-x", 0, &why), DETD_EINVAL);
    CHECK_STR(why, "no such user");
    CHECK_EQ_INT(access_ids_add(&ids, "", 0, &why), DETD_EINVAL);
    CHECK_EQ_INT(ids.n, 0);
    for (int i = 0; i < ACCESS_MAX_IDS; i++)
        CHECK_EQ_INT(access_ids_add(&ids, "7", 0, &why), 0);
    CHECK_EQ_INT(access_ids_add(&ids, "7", 0, &why), DETD_ELIMIT);
}

TEST(open_policy_allows_everyone) {
    struct access_policy p;
    memset(&p, 0, sizeof(p));
    struct access_cred c = {1, 65534, 65534, NULL, 0};
    char why[128] = "";
    CHECK_EQ_INT(access_check(&p, &c, 0, why, sizeof(why)), ACCESS_OK);
    CHECK_EQ_INT(access_check(&p, &c, 1, why, sizeof(why)), ACCESS_OK);
    CHECK_EQ_INT(access_check(NULL, NULL, 1, why, sizeof(why)), ACCESS_OK);
    CHECK(!access_restricted(&p));
}

TEST(allow_lists) {
    struct access_policy p;
    memset(&p, 0, sizeof(p));
    const char *w;
    access_ids_add(&p.allow_uid, "0", 0, &w);
    access_ids_add(&p.allow_gid, "4242", 1, &w);
    char why[128] = "";
    struct access_cred root = {1, 0, 0, NULL, 0};
    struct access_cred nobody = {2, 65534, 65534, NULL, 0};
    gid_t g[] = {10, 4242};
    struct access_cred member = {3, 1234, 1234, g, 2};
    struct access_cred primary = {4, 1234, 4242, NULL, 0};
    CHECK_EQ_INT(access_check(&p, &root, 0, why, sizeof(why)), ACCESS_OK);
    CHECK_EQ_INT(access_check(&p, &member, 0, why, sizeof(why)), ACCESS_OK);
    CHECK_EQ_INT(access_check(&p, &primary, 0, why, sizeof(why)), ACCESS_OK);
    CHECK_EQ_INT(access_check(&p, &nobody, 0, why, sizeof(why)),
                 ACCESS_DENIED_ALLOW);
    CHECK_STR(why, "uid 65534 (gid 65534) is not in --allow-uid/--allow-gid");
    CHECK_EQ_INT(access_check(&p, NULL, 0, why, sizeof(why)),
                 ACCESS_DENIED_NOCRED);
    /* No admin list: every allowed caller may make admin calls. */
    CHECK_EQ_INT(access_check(&p, &member, 1, why, sizeof(why)), ACCESS_OK);
    CHECK_STR(access_reason_label(ACCESS_DENIED_ALLOW), "allow_list");
}

TEST(admin_lists) {
    struct access_policy p;
    memset(&p, 0, sizeof(p));
    const char *w;
    access_ids_add(&p.admin_uid, "1000", 0, &w);
    char why[160] = "";
    struct access_cred root = {1, 0, 0, NULL, 0};
    struct access_cred admin = {2, 1000, 1000, NULL, 0};
    /* Root is not implicit. */
    CHECK_EQ_INT(access_check(&p, &root, 1, why, sizeof(why)),
                 ACCESS_DENIED_ADMIN);
    CHECK(strstr(why, "uid 0 (gid 0) is not in --admin-uid/--admin-gid") !=
          NULL);
    CHECK_EQ_INT(access_check(&p, &root, 0, why, sizeof(why)), ACCESS_OK);
    CHECK_EQ_INT(access_check(&p, &admin, 1, why, sizeof(why)), ACCESS_OK);
    CHECK_STR(access_reason_label(ACCESS_DENIED_ADMIN), "admin_list");
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
