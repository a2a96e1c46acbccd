/* Every reader of a file the user names (token shards, tokenizers, config.json, safetensors, the
 * text that `./train prepare` reads) refuses a pipe or a device by name: opening a pipe with no
 * writer waits for ever, and a device such as /dev/zero reads without end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/safetensors.h"
#include "data/shard.h"
#include "model/train/hf_weights.h"
#include "tests/test.h"
#include "tests/test_util.h"
#include "tokenizer/tokenizer.h"

/* A reader that waits on the pipe ends the run here (SIGALRM) instead of hanging it. */
#define WAIT_LIMIT_S 30

TEST(input_files_that_are_pipes_or_devices_are_refused_by_name_not_waited_on) {
    char dir[800], pipe_path[900], cfg_pipe[900], err[ERR_LEN];
    snprintf(dir, sizeof dir, "%s/hf", test_tmpdir());
    snprintf(pipe_path, sizeof pipe_path, "%s/pipe", test_tmpdir());
    snprintf(cfg_pipe, sizeof cfg_pipe, "%s/config.json", dir);
    REQUIRE(mkfifo(pipe_path, 0600) == 0 && mkdir(dir, 0755) == 0 && mkfifo(cfg_pipe, 0600) == 0,
            "mkfifo under %s", test_tmpdir());
    alarm(WAIT_LIMIT_S);

    uint32_t *tokens;
    uint64_t n;
    ShardHeader h;
    CHECK(shard_read(pipe_path, 10, &tokens, &n, &h, err) == -1 && strstr(err, "pipe is a pipe, not a file: save"),
          "token shard: %s", err);
    CHECK(!tokenizer_load(pipe_path, err) && strstr(err, "pipe is a pipe, not a file"), "tokenizer: %s", err);
    GPTConfig cfg;
    CHECK(hf_read_config(dir, &cfg, err) != 0 && strstr(err, "config.json is a pipe, not a file"), "config.json: %s",
          err);
    StFile st;
    CHECK(st_open(&st, pipe_path, err) != 0 && strstr(err, "pipe is a pipe, not a file"), "safetensors: %s", err);
    CHECK(shard_read("/dev/zero", 10, &tokens, &n, &h, err) == -1 &&
              strstr(err, "/dev/zero is a character device, not a file"),
          "a device as a shard: %s", err);

    /* through the command line: prepare reading its text from the pipe and from /dev/zero */
    char args[2000];
    const char *inputs[] = {pipe_path, "/dev/zero"};
    const char *says[] = {"is a pipe, not a file", "is a character device, not a file"};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "prepare -v 300 -o %s/prepared %s", test_tmpdir(), inputs[i]);
        char *text = NULL;
        const int rc = run_train(args, &text);
        CHECK(rc != 0 && text && strstr(text, says[i]), "prepare %s: rc %d, %s", inputs[i], rc, text ? text : "");
        free(text);
    }
    alarm(0);
}
