/* tests/runner.c - runs every registered TEST (optionally only those whose name contains argv[1])
 * and prints "N passed, M failed" last, followed by the failed tests' names and how many were
 * skipped, so that the one line a script keeps from a long log still says what failed. */
#include "test.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 1024

typedef struct {
    const char *name;
    const char *file;
    test_fn fn;
} TestEntry;

static TestEntry tests[MAX_TESTS];
static int num_tests;
static int current_failures;
static char current_skip[300]; /* why the running test was skipped; empty: it ran */
static char tmpdir_root[512];
static char current_tmpdir[600];

void test_register(const char *name, const char *file, test_fn fn) {
    if (num_tests == MAX_TESTS) {
        fprintf(stderr, "error: more than %d tests; raise MAX_TESTS in tests/runner.c\n", MAX_TESTS);
        exit(2);
    }
    tests[num_tests++] = (TestEntry){name, file, fn};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    current_failures++;
    fprintf(stderr, "    %s:%d: ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *test_train_binary(void) {
    const char *env = getenv("FUSEDGPT_TRAIN");
    return env ? env : "./train";
}

const char *test_tmpdir(void) {
    return current_tmpdir;
}

void test_skip(const char *why) {
    snprintf(current_skip, sizeof current_skip, "%s", why);
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_by_file_then_order(const void *a, const void *b) {
    const TestEntry *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    if (c) return c;
    return (x < y) ? -1 : (x > y);
}

int main(int argc, char **argv) {
    const char *filter = argc > 1 ? argv[1] : NULL;
    /* Constructors run in link order; sorting by file keeps the output stable. Within a file,
     * registration order is declaration order reversed by some linkers, so keep it as is. */
    qsort(tests, num_tests, sizeof tests[0], compare_by_file_then_order);

    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir_root, sizeof tmpdir_root, "%s/fusedgpt-tests-XXXXXX", base);
    if (!mkdtemp(tmpdir_root)) {
        perror("error: cannot create a temporary directory for the tests");
        return 2;
    }

    int passed = 0, failed = 0, skipped = 0;
    const char *failed_names[MAX_TESTS];
    for (int i = 0; i < num_tests; i++) {
        if (filter && !strstr(tests[i].name, filter)) continue;
        snprintf(current_tmpdir, sizeof current_tmpdir, "%s/%d", tmpdir_root, i);
        char cmd[800];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", current_tmpdir);
        if (system(cmd) != 0) {
            fprintf(stderr, "error: cannot create %s\n", current_tmpdir);
            return 2;
        }
        current_failures = 0;
        current_skip[0] = 0;
        fprintf(stderr, "  %-64s ", tests[i].name);
        fflush(stderr);
        const double t0 = seconds_now();
        tests[i].fn();
        /* a test's time when it is long enough to matter to CI's budget */
        const double took = seconds_now() - t0;
        char timing[32] = "";
        if (took >= 1.0) snprintf(timing, sizeof timing, " (%.1f s)", took);
        if (current_failures == 0 && current_skip[0]) {
            fprintf(stderr, "skipped (%s)%s\n", current_skip, timing);
            skipped++;
        } else if (current_failures == 0) {
            fprintf(stderr, "ok%s\n", timing);
            passed++;
        } else {
            fprintf(stderr, "  ^ FAILED (%s)\n", tests[i].file);
            failed_names[failed++] = tests[i].name;
        }
    }
    char cmd[800];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_root);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", tmpdir_root);
    printf("%d passed, %d failed", passed, failed);
    for (int i = 0; i < failed; i++) printf("%s%s", i ? ", " : ": ", failed_names[i]);
    if (skipped) printf("%s%d skipped", failed ? "; " : ", ", skipped);
    printf("\n");
    return failed ? 1 : 0;
}
