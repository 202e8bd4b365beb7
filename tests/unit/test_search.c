/*
 * search: the descriptor grammar of a key that names a search, the checks
 * of such a key, and the shape rule its reported configs must follow.
 */
#include "core/search.h"

#include <string.h>

#include "core/keyid.h"
#include "runner.h"

#define START "R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1"
#define DESC                                                                   \
    "search:inductor.coordesc;tune=XBLOCK:1-4096,R0_BLOCK:1-32768,"            \
    "num_warps:1-32;radius=1"

static int check(const char *a, const char *b, char *why, size_t n) {
    const char *c[] = {a, b};
    int desc = -2;
    int rc = search_check_key(c, 2, &desc, why, n);
    return rc == 0 ? desc : -100;
}

TEST(ordinary_key_is_no_search) {
    const char *c[] = {"BLOCK=64,num_warps=4", "BLOCK=128,num_warps=4"};
    int desc = 7;
    char why[256] = "";
    CHECK_EQ_INT(search_check_key(c, 2, &desc, why, sizeof why), 0);
    CHECK_EQ_INT(desc, -1);
    CHECK_EQ_INT(search_check_key(c, 0, &desc, why, sizeof why), 0);
    CHECK_EQ_INT(desc, -1);
}

TEST(search_key_either_order) {
    char why[256] = "";
    CHECK_EQ_INT(check(START, DESC, why, sizeof why), 1);
    CHECK_EQ_INT(check(DESC, START, why, sizeof why), 0);
    /* Parts other than tune only identify the search. */
    CHECK_EQ_INT(
        check(START, "search:m;x=1;tune=XBLOCK:1-8;y=", why, sizeof why), -100);
    CHECK(strstr(why, "'y='") != NULL);
    CHECK_EQ_INT(
        check(START, "search:m;x=1;tune=XBLOCK:1-8;y=2", why, sizeof why), 1);
}

TEST(malformed_search_keys_name_what_is_wrong) {
    char why[256];
    const char *c3[] = {START, DESC, "XBLOCK=2"};
    int desc;
    CHECK_EQ_INT(search_check_key(c3, 3, &desc, why, sizeof why), -1);
    CHECK(strstr(why, "2 candidates, not 3") != NULL);
    const char *two[] = {DESC, DESC};
    CHECK_EQ_INT(search_check_key(two, 2, &desc, why, sizeof why), -1);
    CHECK(strstr(why, "[0] and [1] both name a search") != NULL);
    struct {
        const char *desc, *words;
    } bad[] = {
        {"search:", "names no method"},
        {"search:;tune=XBLOCK:1-8", "names no method"},
        {"search:m", "has no part tune="},
        {"search:m;radius=1", "has no part tune="},
        {"search:m;tune=", "part 'tune=' is not <name>=<value>"},
        {"search:m;tune=XBLOCK:1-8,", "tune entry '' is not"},
        {"search:m;tune=XBLOCK:0-8", "'XBLOCK:0-8' is not"},
        {"search:m;tune=XBLOCK:8-1", "'XBLOCK:8-1' is not"},
        {"search:m;tune=XBLOCK:01-8", "'XBLOCK:01-8' is not"},
        {"search:m;tune=XBLOCK:1-2147483648", "is not <field>"},
        {"search:m;tune=9X:1-8", "'9X:1-8' is not"},
        {"search:m;tune=X-1:1-8", "is not <field>"},
        {"search:m;tune=XBLOCK:1-8,XBLOCK:1-4", "field 'XBLOCK' twice"},
        {"search:m;tune=XBLOCK:1-8;tune=XBLOCK:1-8", "names tune twice"},
        {"search:m;radius", "part 'radius' is not <name>=<value>"},
        {"search:m;tune=YBLOCK:1-8", "has no field YBLOCK"},
        {"search:m;tune=XBLOCK:2-8", "XBLOCK once as an integer in 2-8"},
        {"search:m;tune=num_ctas:2-8", "num_ctas once as an integer in 2-8"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        if (check(START, bad[i].desc, why, sizeof why) != -100 ||
            strstr(why, bad[i].words) == NULL) {
            fprintf(stderr, "%s: got '%s', want '%s'\n", bad[i].desc, why,
                    bad[i].words);
            CHECK(0);
        }
        /* The candidate at fault by index: the descriptor or the start. */
        if (strncmp(why, "[1] names a search but ", 23) != 0 &&
            strncmp(why, "[0], the search's start, ", 25) != 0) {
            fprintf(stderr, "%s: '%s' names no candidate\n", bad[i].desc, why);
            CHECK(0);
        }
    }
    /* A start holding a tuned field twice or with a non-integer value. */
    CHECK_EQ_INT(check("X=1,X=2", "search:m;tune=X:1-8", why, sizeof why),
                 -100);
    CHECK_EQ_INT(check("X=a", "search:m;tune=X:1-8", why, sizeof why), -100);
    CHECK(strstr(why, "[0], the search's start, must hold X once") != NULL);
    /* More fields than the cap. */
    char big[1024] = "search:m;tune=";
    for (int i = 0; i <= SEARCH_MAX_FIELDS; i++)
        snprintf(big + strlen(big), sizeof big - strlen(big), "%sF%d:1-2",
                 i ? "," : "", i);
    CHECK_EQ_INT(check("F0=1", big, why, sizeof why), -100);
    CHECK(strstr(why, "more than 32 fields") != NULL);
}

TEST(configs_of_the_search) {
    char why[256];
    const char *ok[] = {
        START,
        "R0_BLOCK=4096,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
        "R0_BLOCK=1,XBLOCK=4096,num_warps=32,num_stages=1,num_ctas=1",
        "R0_BLOCK=32768,XBLOCK=3,num_warps=1,num_stages=1,num_ctas=1",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        CHECK_EQ_INT(search_config_ok(DESC, START, ok[i], why, sizeof why), 1);
    struct {
        const char *config, *words;
    } bad[] = {
        {"R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=2,num_ctas=1",
         "part 3 'num_stages=2' differs from the start's 'num_stages=1'"},
        {"R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1",
         "fewer parts than the start"},
        {START ",maxnreg=128", "more parts than the start"},
        {"R0_BLOCK=65536,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "part 0 'R0_BLOCK=65536' is not R0_BLOCK=<integer in 1-32768>"},
        {"R0_BLOCK=0,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "is not R0_BLOCK=<integer"},
        {"R0_BLOCK=02048,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "is not R0_BLOCK=<integer"},
        {"R0_BLOCK=-1,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "is not R0_BLOCK=<integer"},
        {"R0_BLOCK=2k,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "is not R0_BLOCK=<integer"},
        {"XBLOCK=2048,R0_BLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "part 0 'XBLOCK=2048' is not R0_BLOCK="},
        {"R0_BLOCK=,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1",
         "is not R0_BLOCK=<integer"},
        {"", "part 0 '' is not R0_BLOCK="},
        {"R0_BLOCK=2048,XBLOCK=1,num_warps=16,num_stages=1,num_ctas=1,",
         "more parts than the start"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        if (search_config_ok(DESC, START, bad[i].config, why, sizeof why) !=
                0 ||
            strstr(why, bad[i].words) == NULL) {
            fprintf(stderr, "%s: got '%s', want '%s'\n", bad[i].config, why,
                    bad[i].words);
            CHECK(0);
        }
    }
}

/* The descriptor is never a config, with or without a list. */
TEST(descriptor_is_never_a_candidate) {
    const char *c[] = {START, DESC};
    CHECK_EQ_INT(keyid_has_candidate(START, c, 2), 1);
    CHECK_EQ_INT(keyid_has_candidate(DESC, c, 2), 0);
    CHECK_EQ_INT(keyid_has_candidate(DESC, NULL, 0), 0);
    CHECK_EQ_INT(search_is_descriptor(NULL), 0);
    CHECK_EQ_INT(search_is_descriptor("search"), 0);
}

int main(int argc, char **argv) {
    return runner_main(argc, argv);
}
