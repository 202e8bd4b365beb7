/*
 * failalloc: allocation failure injection for unit tests (include once per
 * test executable, after runner.h).
 */
#ifndef DETD_TEST_FAILALLOC_H
#define DETD_TEST_FAILALLOC_H

#include <stddef.h>
#include <stdlib.h>

/*
 * Allocation failure injection. The test targets link with
 * -Wl,--wrap=malloc,calloc,realloc, so the module's allocations come here;
 * fail_at = n makes the n-th allocation from now fail.
 */
void *__real_malloc(size_t n);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t n);
static volatile long fail_at;
static volatile long alloc_calls;

static int should_fail(void) {
    alloc_calls++;
    return fail_at > 0 && --fail_at == 0;
}
void *__wrap_malloc(size_t n);
void *__wrap_malloc(size_t n) {
    return should_fail() ? NULL : __real_malloc(n);
}
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_calloc(size_t n, size_t size) {
    return should_fail() ? NULL : __real_calloc(n, size);
}
void *__wrap_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n) {
    return should_fail() ? NULL : __real_realloc(p, n);
}

/* The sweeps below cannot pass unless the wrapping is in effect. */
static void check_wrapped(void) {
    long before = alloc_calls;
    void *volatile p = malloc(1); /* volatile: not optimized away */
    CHECK(alloc_calls == before + 1);
    free(p);
}

#endif /* DETD_TEST_FAILALLOC_H */
