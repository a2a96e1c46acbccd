/* The data-parallel launcher and rendezvous, without GPUs: `FUSEDGPT_TEST_LAUNCHER=1 ./train -g N`
 * starts N workers that exchange an id through the rendezvous folder and print it; a worker that
 * fails makes the launcher stop the others and fail, naming the rank, quickly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/test.h"
#include "tests/test_util.h"

TEST(dist_launcher_workers_agree_on_the_id) {
    char *out = NULL;
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    int rc = run_train("-g 3", &out);
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 0, "launcher exit status %d: %s", rc, out);
    char ids[3][32] = {{0}};
    for (int r = 0; r < 3; r++) {
        char key[32];
        snprintf(key, sizeof key, "rank %d of 3: id ", r);
        const char *p = strstr(out, key);
        CHECK(p != NULL, "rank %d did not report: %s", r, out);
        if (p) sscanf(p + strlen(key), "%31s", ids[r]);
    }
    CHECK(ids[0][0] && !strcmp(ids[0], ids[1]) && !strcmp(ids[0], ids[2]), "ranks disagree: %s / %s / %s", ids[0],
          ids[1], ids[2]);
    free(out);
}

TEST(dist_launcher_fails_naming_the_rank_that_failed) {
    char *out = NULL;
    setenv("FUSEDGPT_TEST_LAUNCHER", "1", 1);
    /* rank 0 fails before publishing the id: the others would wait 60 s for it, so the launcher
     * must stop them at once */
    setenv("FUSEDGPT_TEST_FAIL_RANK", "0", 1);
    time_t t0 = time(NULL);
    int rc = run_train("-g 3", &out);
    time_t took = time(NULL) - t0;
    unsetenv("FUSEDGPT_TEST_FAIL_RANK");
    unsetenv("FUSEDGPT_TEST_LAUNCHER");
    REQUIRE(out, "could not run ./train");
    CHECK(rc == 1, "launcher exit status %d, expected 1: %s", rc, out);
    CHECK(strstr(out, "error: rank 0 exited with status 3") != NULL, "the failed rank is not named: %s", out);
    CHECK(took < 20, "the launcher took %ld s to give up", (long)took);
    free(out);
}

TEST(dist_worker_environment_errors_are_clear) {
    char *out = NULL;
    setenv("FUSEDGPT_RANK", "2", 1);
    setenv("FUSEDGPT_WORLD_SIZE", "2", 1);
    int rc = run_train("--device cpu -e tiny -x 1", &out);
    unsetenv("FUSEDGPT_RANK");
    unsetenv("FUSEDGPT_WORLD_SIZE");
    CHECK(rc == 2 && out && strstr(out, "inconsistent"), "exit %d: %s", rc, out);
    free(out);
}
