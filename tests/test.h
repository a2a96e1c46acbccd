/* tests/test.h - a minimal test registry shared by the CPU runner (make test) and the GPU runner
 * (make test-gpu).
 *
 *   TEST(fused_matches_canonical_with_ignored_targets) { ... CHECK(cond, "fmt", ...); ... }
 *
 * Each TEST registers itself before main through a constructor, so adding a test file needs no
 * central list. A test fails when any CHECK fails; the runner prints one line per failure and ends
 * with "N passed, M failed" (and ", K skipped" when a test could not run here; exit status 1 on any
 * failure). Timings never belong here. */
#ifndef FUSEDGPT_TEST_H
#define FUSEDGPT_TEST_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);
/* Records a failure of the running test (does not abort it). */
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Path of the built ./train binary, for tests that check its command-line behaviour. */
const char *test_train_binary(void);
/* A fresh empty directory for the running test (under $TMPDIR), removed after the run. */
const char *test_tmpdir(void);
/* Marks the running test skipped, with why (what it needs and this machine lacks); the test then
 * returns. A skipped test is counted apart, never as passed. */
void test_skip(const char *why);

#ifdef __cplusplus
}
#endif

#define TEST(name)                                                                  \
    static void test_##name(void);                                                  \
    __attribute__((constructor)) static void test_register_##name(void) {          \
        test_register(#name, __FILE__, test_##name);                                \
    }                                                                               \
    static void test_##name(void)

#define CHECK(cond, ...)                                                            \
    do {                                                                            \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);                    \
    } while (0)

/* For a check whose failure makes the rest of the test meaningless. */
#define REQUIRE(cond, ...)                                                          \
    do {                                                                            \
        if (!(cond)) {                                                              \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                             \
            return;                                                                 \
        }                                                                           \
    } while (0)

#endif
