/* Checkpoints: state round trip, HF-compatible safetensors (names, shapes, Conv1D transposes,
 * unpadded wte), config mismatch errors, a crashed write leaving the last checkpoint intact, and
 * the writer thread's checkpoints and errors. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "common/err.h"
#include "common/rng.h"
#include "model/train/checkpoint.h"
#include "model/train/checkpoint_writer.h"
#include "tests/test.h"
#include "tests/test_util.h"

static void tiny_table(ParamTable *t, int vocab) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 8, .max_seq_len = 16, .vocab_size = vocab};
    gpt_config_finish(&cfg);
    char err[ERR_LEN];
    if (param_table_build(t, &cfg, err) != 0) fprintf(stderr, "%s\n", err);
}

static float *random_floats(size_t n, uint64_t seed) {
    float *x = malloc(n * 4);
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(&r);
    return x;
}

/* A failed write's hint names the fix for what it met: a file-size limit, a folder that is not
 * writable, a full disk (a permission error used to read "disk full?"). */
TEST(a_write_errors_hint_names_the_fix_for_its_errno) {
    CHECK(strstr(write_error_hint(EFBIG), "ulimit -f"), "EFBIG: %s", write_error_hint(EFBIG));
    CHECK(strstr(write_error_hint(EACCES), "not writable") && strstr(write_error_hint(EROFS), "not writable"),
          "EACCES: %s", write_error_hint(EACCES));
    CHECK(strstr(write_error_hint(ENOSPC), "disk full"), "ENOSPC: %s", write_error_hint(ENOSPC));
    CHECK(!strstr(write_error_hint(EIO), "disk full") && !strstr(write_error_hint(EIO), "not writable"), "EIO: %s",
          write_error_hint(EIO));
}

/* latest naming a checkpoint whose state.bin is gone says so, and how to fall back to an older one. */
TEST(a_latest_checkpoint_without_its_state_file_names_the_older_ones_fix) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 1);
    TrainState st = {.step = 3, .B = 2, .T = 8, .total_batch = 16, .world = 1, .seed = 1};
    char err[ERR_LEN], path[1200];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000003/state.bin", test_tmpdir());
    REQUIRE(unlink(path) == 0, "unlink %s", path);
    float *q = malloc(3 * t.total * sizeof(float));
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "state.bin") && strstr(err, "checkpoint incomplete?") && strstr(err, "latest file"),
          "%s", err);
    free(q);
    free(p);
    param_table_free(&t);
}

TEST(checkpoint_round_trip_restores_everything) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 1), *m = random_floats(t.total, 2), *v = random_floats(t.total, 3);
    TrainState st = {.step = 7, .loader_epoch = 2, .loader_position = 5, .rng = {1, 2, 3, 4}, .B = 2, .T = 8,
                     .total_batch = 32, .world = 4, .seed = 99, .data_tokens = 123456789012ull,
                     .data_fingerprint = 0xfedcba9876543210ull,
                     .settings = {.recorded = 1, .bf16_state = 1, .weight_decay = 0.05f, .grad_clip = 0.5f,
                                  .z_loss = 1e-4f, .label_smoothing = 0.1f}};
    char err[ERR_LEN];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, m, v, &st, 2, err) == 0, "%s", err);
    float *p2 = malloc(t.total * 4), *m2 = malloc(t.total * 4), *v2 = malloc(t.total * 4);
    TrainState st2;
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, p2, m2, v2, &st2, err) == 0, "%s", err);
    CHECK(!memcmp(p, p2, t.total * 4) && !memcmp(m, m2, t.total * 4) && !memcmp(v, v2, t.total * 4),
          "weights or moments differ after the round trip");
    CHECK(st2.step == 7 && st2.loader_epoch == 2 && st2.loader_position == 5 && st2.B == 2 && st2.T == 8 &&
              st2.total_batch == 32 && st2.world == 4 && st2.seed == 99 && !memcmp(st.rng, st2.rng, sizeof st.rng) &&
              st2.data_tokens == st.data_tokens && st2.data_fingerprint == st.data_fingerprint,
          "train state differs after the round trip");
    CHECK(!memcmp(&st.settings, &st2.settings, sizeof st.settings),
          "settings differ after the round trip: recorded %d, bf16 %d, wd %g, clip %g, z %g, smoothing %g",
          st2.settings.recorded, st2.settings.bf16_state, st2.settings.weight_decay, st2.settings.grad_clip,
          st2.settings.z_loss, st2.settings.label_smoothing);
    free(p);
    free(m);
    free(v);
    free(p2);
    free(m2);
    free(v2);
    param_table_free(&t);
}

TEST(checkpoint_safetensors_is_laid_out_like_hf_gpt2) {
    ParamTable t;
    tiny_table(&t, 50); /* Vp = 128: wte must be exported with 50 rows */
    float *p = random_floats(t.total, 4);
    TrainState st = {.step = 3};
    char err[ERR_LEN], path[700];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000003/model.safetensors", test_tmpdir());
    size_t len;
    char *buf = read_file(path, &len);
    REQUIRE(buf && len > 8, "cannot read %s", path);
    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    REQUIRE(hlen % 8 == 0 && 8 + hlen <= len, "header length %llu", (unsigned long long)hlen);
    char *hdr = strndup(buf + 8, hlen);
    CHECK(strstr(hdr, "\"transformer.wte.weight\":{\"dtype\":\"F32\",\"shape\":[50,8]"), "wte shape: %.200s", hdr);
    CHECK(strstr(hdr, "\"transformer.h.1.attn.c_attn.weight\":{\"dtype\":\"F32\",\"shape\":[8,24]"),
          "c_attn must be [in, out] as HF Conv1D");
    CHECK(strstr(hdr, "\"transformer.h.0.mlp.c_proj.weight\":{\"dtype\":\"F32\",\"shape\":[32,8]"),
          "mlp.c_proj must be [4C, C]");
    CHECK(strstr(hdr, "\"transformer.ln_f.bias\":{\"dtype\":\"F32\",\"shape\":[8]"), "ln_f.bias");
    /* Every tensor's data as HF lays it out, by HF's rule rather than our table's flags: the 2-D
     * weights inside the blocks are Conv1D, [in, out], our [out, in] transposed; wte loses its
     * padded rows; everything else is as we store it. */
    for (int i = 0; i < t.count; i++) {
        const ParamInfo *pi = &t.params[i];
        char key[200];
        snprintf(key, sizeof key, "\"%s\":{", pi->name);
        char *at = strstr(hdr, key), *offs = at ? strstr(at, "\"data_offsets\":[") : NULL;
        REQUIRE(at && offs, "%s is not in the header", pi->name);
        const int conv1d = pi->ndim == 2 && strncmp(pi->name, "transformer.h.", 14) == 0;
        const size_t rows = pi->role == ROLE_WTE ? 50 : pi->rows, cols = pi->cols;
        char shape[80];
        if (pi->ndim == 1)
            snprintf(shape, sizeof shape, "\"shape\":[%zu]", rows * cols);
        else
            snprintf(shape, sizeof shape, "\"shape\":[%zu,%zu]", conv1d ? cols : rows, conv1d ? rows : cols);
        CHECK(strncmp(at + strlen(key), "\"dtype\":\"F32\",", 14) == 0 && strstr(at, shape) &&
                  strstr(at, shape) < offs,
              "%s: expected %s in %.120s", pi->name, shape, at);
        const float *data = (const float *)(buf + 8 + hlen + strtoull(offs + 16, NULL, 10));
        int mismatches = 0;
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++)
                mismatches += data[conv1d ? c * rows + r : r * cols + c] != p[pi->offset + r * cols + c];
        CHECK(mismatches == 0, "%s: %d elements not where HF expects them", pi->name, mismatches);
    }
    size_t expect = 8 + hlen;
    for (int i = 0; i < t.count; i++)
        expect += (t.params[i].role == ROLE_WTE ? 50 * 8 : t.params[i].numel) * 4;
    CHECK(len == expect, "file is %zu bytes, expected %zu", len, expect);
    snprintf(path, sizeof path, "%s/step_00000003/config.json", test_tmpdir());
    char *cfg = read_file(path, &len);
    CHECK(cfg && strstr(cfg, "\"vocab_size\": 50") && strstr(cfg, "\"n_layer\": 2") && strstr(cfg, "gelu_new"),
          "config.json lacks the GPT2Config fields");
    free(cfg);
    free(hdr);
    free(buf);
    free(p);
    param_table_free(&t);
}

TEST(checkpoint_with_other_config_is_refused_with_the_flag_to_fix) {
    ParamTable t, other;
    tiny_table(&t, 50);
    tiny_table(&other, 60);
    float *p = random_floats(t.total, 5);
    TrainState st = {.step = 1};
    char err[ERR_LEN] = "";
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    float *q = malloc(other.total * 4 * 3);
    CHECK(checkpoint_load_latest(test_tmpdir(), &other, q, q + other.total, q + 2 * other.total, &st, err) == -1,
          "mismatched vocabulary accepted");
    CHECK(strstr(err, "vocab_size 50") && strstr(err, "-v 50"), "message: %s", err);
    free(q);
    free(p);
    param_table_free(&other);
    param_table_free(&t);
}

TEST(checkpoint_crash_midway_leaves_latest_intact_and_prunes_old) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 6);
    char err[ERR_LEN], path[700];
    for (int s = 1; s <= 3; s++) {
        TrainState st = {.step = s};
        REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    }
    struct stat sb;
    snprintf(path, sizeof path, "%s/step_00000001", test_tmpdir());
    CHECK(stat(path, &sb) != 0, "oldest checkpoint was not pruned (keep 2)");
    /* a crash during the write of step 4 leaves a .tmp directory and the old latest */
    snprintf(path, sizeof path, "%s/step_00000004.tmp", test_tmpdir());
    mkdir(path, 0755);
    TrainState st;
    float *q = malloc(t.total * 4 * 3);
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0, "%s", err);
    CHECK(st.step == 3, "latest is step %d, expected 3", st.step);
    /* latest written by hand: with a completion's trailing slash it names the same checkpoint; a
     * name that is none says how to go on */
    char latest[700];
    snprintf(latest, sizeof latest, "%s/latest", test_tmpdir());
    FILE *lf = fopen(latest, "w");
    REQUIRE(lf && fputs("step_00000003/\n", lf) >= 0 && fclose(lf) == 0, "writing latest");
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0, "%s", err);
    CHECK(st.step == 3, "latest step_00000003/ is step %d", st.step);
    lf = fopen(latest, "w");
    REQUIRE(lf && fputs("/abs/step_00000003\n", lf) >= 0 && fclose(lf) == 0, "writing latest");
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "is corrupt (expected a name like step_00000100)") &&
              strstr(err, "or remove it and the newest whole checkpoint there is taken"),
          "a latest naming no checkpoint: %s", err);
    /* a name of no checkpoint there says which one is */
    lf = fopen(latest, "w");
    REQUIRE(lf && fputs("step_6\n", lf) >= 0 && fclose(lf) == 0, "writing latest");
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "latest names step_6, which is not in ") &&
              strstr(err, "(step_00000003 is the newest whole one)"),
          "a latest naming a missing checkpoint: %s", err);
    /* two names (a hand edit gone wrong) name no one checkpoint; trailing white space is fine */
    lf = fopen(latest, "w");
    REQUIRE(lf && fputs("step_00000003 step_00000002\n", lf) >= 0 && fclose(lf) == 0, "writing latest");
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "is corrupt (expected a name like step_00000100)"),
          "a latest with two names: %s", err);
    lf = fopen(latest, "w");
    REQUIRE(lf && fputs("step_00000003 \n\n\t", lf) >= 0 && fclose(lf) == 0, "writing latest");
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0, "%s", err);
    /* a latest that is there but cannot be read (a link to itself: ELOOP, as a root-proof stand-in for
     * EACCES) names why, not "missing" with advice to start over */
    REQUIRE(unlink(latest) == 0 && symlink("latest", latest) == 0, "a looping latest");
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "cannot read ") && strstr(err, "make it readable") && !strstr(err, "drop -y"),
          "an unreadable latest: %s", err);
    REQUIRE(unlink(latest) == 0, "removing the link");
    lf = fopen(latest, "w");
    REQUIRE(lf && fputs("step_00000003\n", lf) >= 0 && fclose(lf) == 0, "writing latest");
    /* a truncated state file is reported, not read */
    snprintf(path, sizeof path, "%s/step_00000003/state.bin", test_tmpdir());
    REQUIRE(truncate(path, 200) == 0, "truncate");
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "truncated"),
          "truncated state accepted: %s", err);
    /* a folder in its place is named as one */
    REQUIRE(unlink(path) == 0 && mkdir(path, 0755) == 0, "a folder as %s", path);
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "state.bin is a folder, not a state file"),
          "a folder as state.bin: %s", err);
    free(q);
    free(p);
    param_table_free(&t);
}

/* Links at the names a save writes, prunes or clears (an old checkpoint kept on another disk, a
 * leftover step_*.tmp, latest.tmp) are removed as links: the files they lead to stay as they were. */
TEST(a_link_at_a_checkpoints_name_is_removed_as_a_link_and_its_target_is_left) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 8);
    char err[ERR_LEN], run[700], elsewhere[700], kept[760], link[760];
    snprintf(run, sizeof run, "%s/linked_run", test_tmpdir());
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", test_tmpdir());
    REQUIRE(mkdir(run, 0755) == 0 && mkdir(elsewhere, 0755) == 0, "setup");
    const char *names[] = {"state.bin", "model.safetensors", "config.json", "latest"};
    for (int i = 0; i < 4; i++) {
        snprintf(kept, sizeof kept, "%s/%s", elsewhere, names[i]);
        FILE *f = fopen(kept, "w");
        REQUIRE(f && fputs("not this run's\n", f) >= 0 && fclose(f) == 0, "writing %s", kept);
    }
    snprintf(link, sizeof link, "%s/step_00000001", run); /* pruned below with keep 1 */
    REQUIRE(symlink(elsewhere, link) == 0, "%s", link);
    snprintf(link, sizeof link, "%s/step_00000002.tmp", run); /* a crash's leftover at the name step 2 writes */
    REQUIRE(symlink(elsewhere, link) == 0, "%s", link);
    snprintf(link, sizeof link, "%s/latest.tmp", run);
    snprintf(kept, sizeof kept, "%s/latest", elsewhere);
    REQUIRE(symlink(kept, link) == 0, "%s", link);
    TrainState st = {.step = 2};
    REQUIRE(checkpoint_save(run, &t, p, p, p, &st, 1, err) == 0, "%s", err);
    for (int i = 0; i < 4; i++) {
        snprintf(kept, sizeof kept, "%s/%s", elsewhere, names[i]);
        char *got = read_text(kept);
        CHECK(got && !strcmp(got, "not this run's\n"), "%s was written or removed through a link", kept);
        free(got);
    }
    struct stat sb;
    snprintf(link, sizeof link, "%s/step_00000001", run);
    CHECK(lstat(link, &sb) != 0, "the link at the pruned step_00000001 is still there");
    snprintf(link, sizeof link, "%s/step_00000002/state.bin", run);
    CHECK(lstat(link, &sb) == 0 && S_ISREG(sb.st_mode), "step 2 was not saved whole");
    TrainState back;
    float *q = malloc(t.total * 4 * 3);
    REQUIRE(checkpoint_load_latest(run, &t, q, q + t.total, q + 2 * t.total, &back, err) == 0, "%s", err);
    CHECK(back.step == 2, "latest is step %d, expected 2", back.step);
    free(q);
    free(p);
    param_table_free(&t);
}

/* Flips one byte of a file at offset at. */
static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    unsigned char c = 0;
    if (!f || fseek(f, at, SEEK_SET) != 0 || fread(&c, 1, 1, f) != 1) fprintf(stderr, "flip_byte: cannot read %s\n", path);
    c ^= 0x10;
    if (f && (fseek(f, at, SEEK_SET) != 0 || fwrite(&c, 1, 1, f) != 1)) fprintf(stderr, "flip_byte: cannot write\n");
    if (f) fclose(f);
}

TEST(checkpoint_changed_on_disk_is_refused_and_a_resealed_one_accepted) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 8), *q = malloc(t.total * 4 * 3);
    TrainState st = {.step = 5, .B = 2, .T = 8, .total_batch = 16};
    char err[ERR_LEN] = "", path[700];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000005/state.bin", test_tmpdir());
    const long at[] = {100 /* the RNG state, in the header */, 400 /* a weight */, 400 + (long)t.total * 8 /* v */};
    for (int i = 0; i < 3; i++) {
        flip_byte(path, at[i]);
        CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
                  strstr(err, "does not match its checksum") && strstr(err, "latest"),
              "byte %ld changed: %s", at[i], err);
        flip_byte(path, at[i]); /* back */
        CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0,
              "restored file refused: %s", err);
    }
    /* a damaged shape field is named as the damage, not as a flag to pass (--heads 7 would fix nothing) */
    const long heads_at = 8 + 4 + 4 + 4; /* magic, version, world, num_layers */
    flip_byte(path, heads_at);
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "does not match its checksum") && !strstr(err, "--heads"),
          "a damaged head count: %s", err);
    flip_byte(path, heads_at);
    /* a header rewritten on purpose (a tool that converts checkpoints) and resealed loads */
    flip_byte(path, 100);
    REQUIRE(checkpoint_state_reseal(path, err) == 0, "%s", err);
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0,
          "resealed file refused: %s", err);
    /* a checkpoint directory renamed by hand: its step and its name disagree */
    char moved[700];
    snprintf(path, sizeof path, "%s/step_00000005", test_tmpdir());
    snprintf(moved, sizeof moved, "%s/step_00000009", test_tmpdir());
    REQUIRE(rename(path, moved) == 0, "rename");
    snprintf(path, sizeof path, "%s/latest", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f && fprintf(f, "step_00000009\n") > 0 && fclose(f) == 0, "writing latest");
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "says step 5 but its directory is step_00000009"),
          "renamed checkpoint: %s", err);
    free(q);
    free(p);
    param_table_free(&t);
}

TEST(a_state_file_whose_padded_vocabulary_differs_from_the_models_is_refused) {
    /* the padded vocabulary decides the layout of wte and of everything after it; a file that pads
     * otherwise (resealed by a tool, or by another build) must not be read into this layout */
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 9), *q = malloc(t.total * 4 * 3);
    TrainState st = {.step = 3, .B = 2, .T = 8, .total_batch = 16};
    char err[ERR_LEN] = "", path[700];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000003/state.bin", test_tmpdir());
    const long padded_at = 8 + 4 + 4 + 5 * 4; /* magic, version, world, then five int32 of the config */
    const int32_t other = t.cfg.padded_vocab_size + 128;
    FILE *f = fopen(path, "r+b");
    REQUIRE(f && fseek(f, padded_at, SEEK_SET) == 0 && fwrite(&other, 4, 1, f) == 1 && fclose(f) == 0, "patching %s",
            path);
    REQUIRE(checkpoint_state_reseal(path, err) == 0, "%s", err);
    char want[200];
    snprintf(want, sizeof want, "pads its vocabulary of 50 to %d rows but this model pads it to %d", (int)other,
             t.cfg.padded_vocab_size);
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, want),
          "a state file padded otherwise: %s", err);
    free(q);
    free(p);
    param_table_free(&t);
}

TEST(checkpoint_saved_below_later_steps_is_kept_and_the_later_ones_too) {
    /* steps 2 and 4 exist (a future the user rolled back from by editing latest); the run saves steps
     * 1..3 (keep 2): each must survive its own pruning and latest must name it; step 4 is left alone */
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 9), *q = malloc(t.total * 4 * 3);
    char err[ERR_LEN] = "", path[700];
    struct stat sb;
    for (int s = 2; s <= 4; s += 2) {
        TrainState st = {.step = s};
        REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    }
    for (int s = 1; s <= 3; s++) { /* the new run: steps 1, 2 (replaces the old 2), 3 */
        TrainState st = {.step = s};
        REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
        TrainState got;
        REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &got, err) == 0,
                "after saving step %d: %s", s, err);
        CHECK(got.step == s, "latest is step %d after saving step %d", got.step, s);
    }
    const int expect[] = {0, 0, 1, 1, 1}; /* steps 1..4: 1 pruned (keep 2 of this run's), 2 3 kept, 4 untouched */
    for (int s = 1; s <= 4; s++) {
        snprintf(path, sizeof path, "%s/step_%08d", test_tmpdir(), s);
        CHECK((stat(path, &sb) == 0) == expect[s], "step %d: exists %d, expected %d", s, stat(path, &sb) == 0,
              expect[s]);
    }
    free(q);
    free(p);
    param_table_free(&t);
}

static int exists(const char *dir, const char *name) {
    char p[1200];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

TEST(a_new_run_sets_the_earlier_runs_files_aside_whole) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 4);
    char err[ERR_LEN] = "", moved[1300], dir[800];
    snprintf(dir, sizeof dir, "%s/run", test_tmpdir());
    CHECK(checkpoint_set_aside_run(dir, moved, sizeof moved, err) == 0, "no directory yet: %s", err);
    for (int s = 3; s <= 6; s += 3) {
        TrainState st = {.step = s};
        REQUIRE(checkpoint_save(dir, &t, p, p, p, &st, 5, err) == 0, "%s", err);
    }
    const char *others[] = {"log.jsonl", "step_00000009.tmp", "notes.txt", ".lock"};
    for (int i = 0; i < 4; i++) {
        char f[1200];
        snprintf(f, sizeof f, "%s/%s", dir, others[i]);
        FILE *fp = fopen(f, "w");
        REQUIRE(fp && fclose(fp) == 0, "creating %s", f);
    }
    REQUIRE(checkpoint_set_aside_run(dir, moved, sizeof moved, err) == 1, "set aside: %s", err);
    CHECK(strstr(moved, "/run/earlier_run_1"), "moved to %s", moved);
    const char *run_files[] = {"latest", "log.jsonl", "step_00000003", "step_00000006", "step_00000009.tmp"};
    for (int i = 0; i < 5; i++)
        CHECK(exists(moved, run_files[i]) && !exists(dir, run_files[i]), "%s was not moved", run_files[i]);
    CHECK(exists(dir, "notes.txt") && exists(dir, ".lock"), "files that are not the run's were moved");
    /* the earlier run resumes from where it went: its checkpoint is whole */
    TrainState got;
    float *q = malloc(t.total * 4 * 3);
    CHECK(checkpoint_load_latest(moved, &t, q, q + t.total, q + 2 * t.total, &got, err) == 0 && got.step == 6,
          "the moved run does not load: %s", err);
    CHECK(checkpoint_set_aside_run(dir, moved, sizeof moved, err) == 0, "nothing left to move: %s", err);
    TrainState st = {.step = 1};
    REQUIRE(checkpoint_save(dir, &t, p, p, p, &st, 1, err) == 0, "%s", err);
    REQUIRE(checkpoint_set_aside_run(dir, moved, sizeof moved, err) == 1, "second set aside: %s", err);
    CHECK(strstr(moved, "/run/earlier_run_2") && exists(moved, "step_00000001") && exists(moved, "latest"),
          "second run moved to %s", moved);
    free(q);
    free(p);
    param_table_free(&t);
}

TEST(a_missing_latest_resumes_from_the_newest_checkpoint_that_loads_whole) {
    /* a full disk while latest was replaced: the checkpoints are whole, latest is gone and an empty
     * latest.tmp remains */
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 10), *q = malloc(t.total * 4 * 3);
    char err[ERR_LEN] = "", path[700], name[64] = "";
    for (int s = 1; s <= 3; s++) {
        TrainState st = {.step = s};
        REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 3, err) == 0, "%s", err);
    }
    snprintf(path, sizeof path, "%s/latest", test_tmpdir());
    REQUIRE(unlink(path) == 0, "removing latest");
    snprintf(path, sizeof path, "%s/latest.tmp", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f && fclose(f) == 0, "writing an empty latest.tmp");
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == 1 && strcmp(name, "step_00000003") == 0,
          "without latest the newest checkpoint is '%s': %s", name, err);
    TrainState st = {0};
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0 && st.step == 3,
          "loaded step %d: %s", st.step, err);
    /* a newest checkpoint damaged on disk is passed over for the next one that loads whole */
    snprintf(path, sizeof path, "%s/step_00000003/state.bin", test_tmpdir());
    flip_byte(path, 400);
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0 && st.step == 2,
          "loaded step %d past a damaged step 3: %s", st.step, err);
    /* a truncated one is not even offered */
    snprintf(path, sizeof path, "%s/step_00000003/state.bin", test_tmpdir());
    REQUIRE(truncate(path, 100) == 0, "truncate");
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == 1 && strcmp(name, "step_00000002") == 0,
          "past a truncated step 3 the newest checkpoint is '%s': %s", name, err);
    /* none left whole: the error says what is missing */
    for (int s = 1; s <= 2; s++) {
        snprintf(path, sizeof path, "%s/step_%08d/state.bin", test_tmpdir(), s);
        flip_byte(path, 400);
    }
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
              strstr(err, "step_00000002/state.bin does not match its checksum"),
          "no whole checkpoint: %s", err);
    /* and every one cut short: not 'drop -y', which would start anew over them, but what is wrong */
    for (int s = 1; s <= 2; s++) {
        snprintf(path, sizeof path, "%s/step_%08d/state.bin", test_tmpdir(), s);
        REQUIRE(truncate(path, 100) == 0, "truncate");
    }
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == -1 &&
              strstr(err, "every step_* checkpoint there is incomplete or damaged") && !strstr(err, "drop -y"),
          "only truncated checkpoints: %s", err);
    /* the same when opening one fails otherwise (a directory in the state file's place): the search
     * must not take that failure's errno for the missing latest's */
    snprintf(path, sizeof path, "%s/step_00000002/state.bin", test_tmpdir());
    REQUIRE(unlink(path) == 0 && mkdir(path, 0755) == 0, "making %s a directory", path);
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == -1 &&
              strstr(err, "every step_* checkpoint there is incomplete or damaged"),
          "a state file that is a directory: %s", err);
    REQUIRE(rmdir(path) == 0, "removing %s", path);
    free(q);
    free(p);
    param_table_free(&t);
}

TEST(a_latest_file_whose_name_is_longer_than_a_name_can_be_is_corrupt_not_cut_short) {
    /* cut to its first 255 characters it could name another checkpoint (the trainer's name buffer
     * holds 255) */
    char path[700], name[256], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/latest", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f, "writing %s", path);
    fputs("step_00000001", f);
    for (int i = 0; i < 300; i++) fputc('1', f);
    fputc('\n', f);
    fclose(f);
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == -1 && strstr(err, "latest is corrupt"),
          "a 313-character name: %s", err);
    /* a NUL inside the name would end it early, leaving the bytes after it unread */
    f = fopen(path, "wb");
    REQUIRE(f && fwrite("step_00000006\0garbage\n", 1, 22, f) == 22 && fclose(f) == 0, "writing %s", path);
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == -1 && strstr(err, "latest is corrupt"),
          "a name with a NUL inside: %s", err);
    f = fopen(path, "wb");
    REQUIRE(f && fputs("  step_00000006\n", f) >= 0 && fclose(f) == 0, "writing %s", path);
    CHECK(checkpoint_latest_name(test_tmpdir(), name, sizeof name, err) == 0 && !strcmp(name, "step_00000006"),
          "a name after spaces: %s", err);
}

/* The values of x rounded to bf16 (truncated: any bf16 will do), so that an array holds only bf16s. */
static void to_bf16_values(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        bits &= 0xffff0000u;
        memcpy(&x[i], &bits, 4);
    }
}

static long file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* x (weights, m, v of t->total values each) saved as step `step` into the test's run directory,
 * keeping only that checkpoint: its state.bin's path into path (size bytes) and its size in bytes,
 * or -1 when the save failed (its message in err). */
static long save_state(const ParamTable *t, const float *x, int step, char *path, size_t size, char *err) {
    TrainState st = {.step = step, .B = 2, .T = 8, .total_batch = 16};
    if (checkpoint_save(test_tmpdir(), t, x, x + t->total, x + 2 * t->total, &st, 1, err) != 0) return -1;
    snprintf(path, size, "%s/step_%08d/state.bin", test_tmpdir(), step);
    return file_size(path);
}

/* Whether the run directory's latest checkpoint loads into q with x's bits (count values compared). */
static int loads_as(const ParamTable *t, float *q, const float *x, size_t count, char *err) {
    TrainState st;
    memset(q, 0xff, 3 * t->total * sizeof(float));
    return checkpoint_load_latest(test_tmpdir(), t, q, q + t->total, q + 2 * t->total, &st, err) == 0 &&
           memcmp(q, x, count * sizeof(float)) == 0;
}

/* An array whose every value is a bf16 (all three under --optimizer-state bf16) is stored in two
 * bytes a value and loads back to the same bits; one value that is not keeps its array fp32; a
 * changed byte of a bf16 array fails the checksum, a file cut short names the size it needs, and a
 * resealed one loads. */
TEST(arrays_of_bf16_values_are_stored_in_two_bytes_and_load_back_bit_for_bit) {
    ParamTable t;
    tiny_table(&t, 50);
    const size_t n = t.total;
    float *x = random_floats(3 * n, 21), *q = malloc(3 * n * sizeof(float));
    char err[ERR_LEN] = "", path[700];
    REQUIRE(q, "out of memory");
    const long header = save_state(&t, x, 4, path, sizeof path, err) - (long)(12 * n); /* every array fp32 */
    REQUIRE(header > 0 && header < 4096, "header of %ld bytes: %s", header, err);
    /* m and v bf16 (the weights not): 4 + 2 + 2 bytes a parameter */
    to_bf16_values(x + n, 2 * n);
    x[2 * n + 5] = -0.0f; /* a signed zero and a tiny bf16 are bf16s too */
    x[n + 7] = 0x1p-133f;
    long size = save_state(&t, x, 5, path, sizeof path, err);
    CHECK(size == header + (long)(8 * n), "m and v bf16: %ld bytes, expected %ld (%s)", size, header + (long)(8 * n),
          err);
    CHECK(loads_as(&t, q, x, 3 * n, err) && signbit(q[2 * n + 5]), "m and v bf16 loaded other values: %s", err);
    /* all three: 6 bytes a parameter */
    to_bf16_values(x, n);
    size = save_state(&t, x, 6, path, sizeof path, err);
    CHECK(size == header + (long)(6 * n), "all bf16: %ld bytes, expected %ld (%s)", size, header + (long)(6 * n), err);
    CHECK(loads_as(&t, q, x, 3 * n, err), "all bf16 loaded other values: %s", err);
    /* a changed byte of v (a bf16 array, the file's last 2n bytes) */
    flip_byte(path, size - (long)n);
    CHECK(!loads_as(&t, q, x, 3 * n, err) && strstr(err, "does not match its checksum"), "a changed bf16 byte: %s",
          err);
    /* a header whose mask has a bit no writer sets is corrupt, whatever its checksum */
    flip_byte(path, header - 16);
    CHECK(!loads_as(&t, q, x, 3 * n, err) && strstr(err, "not a fusedgpt state file (corrupt)"), "a mask of 0x17: %s",
          err);
    flip_byte(path, header - 16);
    /* resealed, it loads with that value changed, the rest as saved */
    REQUIRE(checkpoint_state_reseal(path, err) == 0, "%s", err);
    CHECK(loads_as(&t, q, x, 2 * n + n / 2, err) && q[2 * n + n / 2] != x[2 * n + n / 2], "the resealed bf16 file: %s",
          err);
    /* one value of the weights that is no bf16 keeps them fp32 */
    x[3] = 1.0f + 0x1p-20f;
    size = save_state(&t, x, 7, path, sizeof path, err);
    CHECK(size == header + (long)(8 * n), "weights with one fp32 value: %ld bytes, expected %ld (%s)", size,
          header + (long)(8 * n), err);
    CHECK(loads_as(&t, q, x, 3 * n, err), "weights fp32, moments bf16: %s", err);
    /* cut short by one bf16: the size it needs is named */
    REQUIRE(truncate(path, size - 2) == 0, "truncate");
    char expected[64];
    snprintf(expected, sizeof expected, "expected %ld bytes", header + (long)(8 * n));
    CHECK(!loads_as(&t, q, x, 3 * n, err) && strstr(err, expected), "cut short: %s", err);
    free(q);
    free(x);
    param_table_free(&t);
}

/* A header's schedule that no run writes (a state file edited and resealed) is refused
 * when it loads, not met as an overflow in the learning-rate schedule. */
TEST(a_resealed_state_file_with_a_negative_warmup_is_refused) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 5), *q = malloc(t.total * 4 * 3);
    char err[ERR_LEN] = "";
    const TrainState bad[] = {
        {.step = 3, .B = 2, .T = 8, .total_batch = 16, .schedule = {.warmup = INT_MIN, .total_steps = 10}},
        {.step = 3, .B = 2, .T = 8, .total_batch = 16, .schedule = {.warmup = -1, .total_steps = 10}},
        {.step = 3, .B = 2, .T = 8, .total_batch = 16, .schedule = {.total_steps = -1}},
        {.step = 3, .B = 2, .T = 8, .total_batch = 16, .schedule = {.total_steps = 10, .decay_steps = -1}},
        {.step = 3, .B = 2, .T = 8, .total_batch = 16, .schedule = {.total_steps = 10, .shape = (LrShape)3}}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        TrainState st;
        char dir[700];
        snprintf(dir, sizeof dir, "%s/case%zu", test_tmpdir(), i);
        REQUIRE(mkdir(dir, 0755) == 0, "%s", dir);
        REQUIRE(q && checkpoint_save(dir, &t, p, p, p, &bad[i], 2, err) == 0, "%s", err);
        CHECK(checkpoint_load_latest(dir, &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
                  strstr(err, "no run writes"),
              "case %zu: %s", i, err);
    }
    free(q);
    free(p);
    param_table_free(&t);
}

/* A NaN or an Inf in a state file whose checksum holds (edited and resealed) is named with its
 * tensor when the checkpoint loads, not found as a diverged loss a step into the resume. */
TEST(a_resealed_state_file_holding_a_nan_moment_is_refused_naming_its_tensor) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 9), *q = malloc(t.total * 4 * 3);
    TrainState st = {.step = 3, .B = 2, .T = 8, .total_batch = 16};
    char err[ERR_LEN] = "", path[700];
    REQUIRE(q && checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 2, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000003/state.bin", test_tmpdir());
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0, "%s", path);
    const ParamInfo *last = &t.params[t.count - 1];
    const struct {
        int array; /* 0 weights, 1 m, 2 v */
        float value;
        const char *what;
    } cases[] = {{1, NAN, "first moment (AdamW's m)"}, {2, INFINITY, "second moment (AdamW's v)"}, {0, -INFINITY, "weight"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        /* the arrays end the file: params, m, v, each t.total floats */
        const long at = (long)sb.st_size - (long)((3 - cases[c].array) * t.total - last->offset) * 4;
        FILE *f = fopen(path, "r+b");
        float old;
        REQUIRE(f && fseek(f, at, SEEK_SET) == 0 && fread(&old, 4, 1, f) == 1 && fseek(f, at, SEEK_SET) == 0 &&
                    fwrite(&cases[c].value, 4, 1, f) == 1 && fclose(f) == 0,
                "editing %s", path);
        REQUIRE(checkpoint_state_reseal(path, err) == 0, "%s", err);
        CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == -1 &&
                  strstr(err, cases[c].what) && strstr(err, last->name) && strstr(err, "which training never saves"),
              "case %zu: %s", c, err);
        f = fopen(path, "r+b");
        REQUIRE(f && fseek(f, at, SEEK_SET) == 0 && fwrite(&old, 4, 1, f) == 1 && fclose(f) == 0, "restoring");
        REQUIRE(checkpoint_state_reseal(path, err) == 0, "%s", err);
        CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &st, err) == 0,
              "case %zu restored: %s", c, err);
    }
    free(q);
    free(p);
    param_table_free(&t);
}

/* 13M parameters, 51 MB an array: several of the loader's 16 MB read pieces and a ragged tail, and a
 * write that takes far longer than a process's exit. 0, or -1 with a message in err. */
static int large_table(ParamTable *t, char *err) {
    GPTConfig cfg = {.num_layers = 1, .num_heads = 2, .dim = 256, .max_seq_len = 16, .vocab_size = 50001};
    gpt_config_finish(&cfg);
    return param_table_build(t, &cfg, err);
}

/* A state of several read pieces (16 MB each, read on every core at once) and a ragged tail comes back
 * whole: 13M parameters, 51 MB an array. */
TEST(a_state_of_many_read_pieces_comes_back_whole) {
    ParamTable t;
    char err[ERR_LEN], dir[900];
    REQUIRE(large_table(&t, err) == 0, "%s", err);
    REQUIRE(t.total * sizeof(float) > ((size_t)48 << 20), "the state is only %zu bytes an array", t.total * 4);
    float *p = random_floats(t.total, 21), *m = random_floats(t.total, 22), *v = random_floats(t.total, 23);
    float *back = malloc(3 * t.total * sizeof(float));
    REQUIRE(back, "host memory");
    TrainState st = {.step = 2, .B = 2, .T = 8, .total_batch = 16, .world = 1, .seed = 1}, st2;
    snprintf(dir, sizeof dir, "%s/large", test_tmpdir());
    REQUIRE(checkpoint_save(dir, &t, p, m, v, &st, 2, err) == 0, "%s", err);
    REQUIRE(checkpoint_load_latest(dir, &t, back, back + t.total, back + 2 * t.total, &st2, err) == 0, "%s", err);
    CHECK(!memcmp(back, p, t.total * 4) && !memcmp(back + t.total, m, t.total * 4) &&
              !memcmp(back + 2 * t.total, v, t.total * 4) && st2.step == 2,
          "the weights or moments differ after the round trip");
    free(back);
    free(v);
    free(m);
    free(p);
    param_table_free(&t);
}

/* The writer's thread writes the very files a save in the caller's thread does, names its step when
 * waited for, and then has nothing pending. */
TEST(the_writer_thread_writes_the_files_a_save_in_the_callers_thread_writes) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 4), *m = random_floats(t.total, 5), *v = random_floats(t.total, 6);
    TrainState st = {.step = 12, .loader_position = 3, .B = 2, .T = 8, .total_batch = 16, .world = 1, .seed = 5};
    char err[ERR_LEN], here[900], there[900], a[1000], b[1000];
    snprintf(here, sizeof here, "%s/in_caller", test_tmpdir());
    snprintf(there, sizeof there, "%s/on_thread", test_tmpdir());
    REQUIRE(checkpoint_save(here, &t, p, m, v, &st, 2, err) == 0, "%s", err);
    static CheckpointWriter w; /* zero: nothing pending */
    int step = -1;
    double seconds = -1;
    CHECK(checkpoint_writer_wait(&w, &step, &seconds, err) == 1 && !checkpoint_writer_finished(&w),
          "a writer that never started has a write pending");
    REQUIRE(checkpoint_writer_start(&w, there, &t, p, m, v, &st, NULL, 2, err) == 0, "%s", err);
    st.step = 99; /* the writer took a copy: the caller's TrainState is its own again */
    CHECK(checkpoint_writer_start(&w, there, &t, p, m, v, &st, NULL, 2, err) == -1 && strstr(err, "pending"),
          "a second write started over a pending one: %s", err);
    for (int n = 0; n < 6000 && !checkpoint_writer_finished(&w); n++) usleep(10000);
    CHECK(checkpoint_writer_finished(&w), "the write did not finish within a minute");
    CHECK(checkpoint_writer_wait(&w, &step, &seconds, err) == 0 && step == 12 && seconds >= 0, "wait: step %d: %s",
          step, err);
    CHECK(checkpoint_writer_wait(&w, &step, &seconds, err) == 1, "the write is still pending after its wait");
    const char *files[3] = {"state.bin", "model.safetensors", "config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/step_00000012/%s", here, files[i]);
        snprintf(b, sizeof b, "%s/step_00000012/%s", there, files[i]);
        CHECK(same_bytes(a, b), "%s differs from the caller's", b);
    }
    snprintf(b, sizeof b, "%s/latest", there);
    char *latest = read_text(b);
    CHECK(latest && strcmp(latest, "step_00000012\n") == 0, "latest: %s", latest ? latest : "(none)");
    free(latest);
    free(v);
    free(m);
    free(p);
    param_table_free(&t);
}

/* A write that fails on the writer's thread fails its wait with the save's own message, and leaves
 * the writer free for the next one. */
TEST(a_write_that_fails_on_the_writer_thread_fails_its_wait_with_the_saves_message) {
    ParamTable t;
    tiny_table(&t, 50);
    float *p = random_floats(t.total, 7);
    TrainState st = {.step = 4, .B = 2, .T = 8, .total_batch = 16, .world = 1, .seed = 5};
    char err[ERR_LEN], file[900], under[1000];
    snprintf(file, sizeof file, "%s/a_file", test_tmpdir());
    FILE *f = fopen(file, "w");
    REQUIRE(f && fputs("not a folder\n", f) >= 0 && fclose(f) == 0, "writing %s", file);
    snprintf(under, sizeof under, "%s/run", file); /* a run directory inside a file cannot be made */
    static CheckpointWriter w;
    REQUIRE(checkpoint_writer_start(&w, under, &t, p, p, p, &st, NULL, 2, err) == 0, "%s", err);
    int step = -1;
    double seconds;
    CHECK(checkpoint_writer_wait(&w, &step, &seconds, err) == -1 && step == 4 && strstr(err, "cannot create run directory") &&
              strstr(err, under),
          "wait: %s", err);
    snprintf(under, sizeof under, "%s/run", test_tmpdir());
    CHECK(checkpoint_writer_start(&w, under, &t, p, p, p, &st, NULL, 2, err) == 0 &&
              checkpoint_writer_wait(&w, &step, &seconds, err) == 0,
          "the next write after a failed one: %s", err);
    free(p);
    param_table_free(&t);
}

/* A process that calls exit() while a write is in flight (a CUDA error, a shard changed under the
 * run) waits for it: the checkpoint lands whole and latest names it. 13M parameters, so the write
 * takes far longer than the exit. */
TEST(an_exit_with_a_write_in_flight_waits_for_the_checkpoint_to_land_whole) {
    ParamTable t;
    char err[ERR_LEN], dir[900];
    REQUIRE(large_table(&t, err) == 0, "%s", err);
    float *p = random_floats(t.total, 31);
    snprintf(dir, sizeof dir, "%s/exited", test_tmpdir());
    fflush(stdout);
    fflush(stderr);
    const pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(9);
        static CheckpointWriter w;
        TrainState st = {.step = 6, .B = 2, .T = 8, .total_batch = 16, .world = 1, .seed = 1};
        if (checkpoint_writer_start(&w, dir, &t, p, p, p, &st, NULL, 2, err) != 0) _exit(8);
        st.step = 7; /* the writer has its own copy */
        exit(3);
    }
    int status = 0;
    REQUIRE(pid > 0 && waitpid(pid, &status, 0) == pid, "fork or wait failed");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 3, "the child ended with status %#x", status);
    float *back = malloc(3 * t.total * sizeof(float));
    TrainState st2;
    REQUIRE(back, "host memory");
    CHECK(checkpoint_load_latest(dir, &t, back, back + t.total, back + 2 * t.total, &st2, err) == 0 && st2.step == 6 &&
              !memcmp(back, p, t.total * 4),
          "no whole checkpoint of step 6 after the exit: %s", err);
    free(back);
    free(p);
    param_table_free(&t);
}
