/* Starting from Hugging Face GPT-2 weights: a checkpoint we export reads back bit for bit and gives
 * the same loss on the CPU backend; GPT-2's own layout (names without "transformer.", the mask
 * buffers, lm_head.weight, half precision) reads too; what is not a GPT-2 of ours is refused; and
 * ./train --init-from refuses flags that disagree with the checkpoint, naming the flag. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/err.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "model/backend.h"
#include "model/train/checkpoint.h"
#include "model/train/hf_weights.h"
#include "tests/test.h"
#include "tests/test_util.h"

static int tiny_table(ParamTable *t, int vocab) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 32, .vocab_size = vocab};
    gpt_config_finish(&cfg);
    char err[ERR_LEN];
    int rc = param_table_build(t, &cfg, err);
    if (rc) fprintf(stderr, "%s\n", err);
    return rc;
}

static float loss_of(const ParamTable *t, const float *params, const int *in, const int *tg) {
    char err[ERR_LEN];
    Backend *be = backend_cpu_create(t, 2, 16, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 1, NULL, err);
    if (!be) return NAN;
    float *zero = calloc(t->total, sizeof *zero);
    be->ops->write_state(be, params, zero, zero);
    float loss = be->ops->eval_loss(be, in, tg, NULL);
    be->ops->destroy(be);
    free(zero);
    return loss;
}

TEST(hf_weights_export_then_import_gives_the_same_loss_bit_for_bit) {
    ParamTable t;
    REQUIRE(tiny_table(&t, 300) == 0, "table");
    float *p = malloc(t.total * sizeof *p), *back = malloc(t.total * sizeof *back);
    param_init(&t, p, 42);
    TrainState st = {.step = 5};
    char err[ERR_LEN], dir[800];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 1, err) == 0, "%s", err);
    snprintf(dir, sizeof dir, "%s/step_00000005", test_tmpdir());
    GPTConfig cfg;
    REQUIRE(hf_read_config(dir, &cfg, err) == 0, "%s", err);
    CHECK(cfg.num_layers == 2 && cfg.num_heads == 2 && cfg.dim == 16 && cfg.max_seq_len == 32 && cfg.vocab_size == 300 &&
              cfg.padded_vocab_size == t.cfg.padded_vocab_size,
          "config read back as L=%d NH=%d C=%d T=%d V=%d", cfg.num_layers, cfg.num_heads, cfg.dim, cfg.max_seq_len,
          cfg.vocab_size);
    REQUIRE(hf_read_weights(dir, &t, back, err) == 0, "%s", err);
    CHECK(memcmp(p, back, t.total * sizeof *p) == 0, "the weights differ after export and import");
    int in[32], tg[32];
    Rng r;
    rng_seed(&r, 7);
    for (int i = 0; i < 32; i++) in[i] = (int)rng_below(&r, 300), tg[i] = (int)rng_below(&r, 300);
    float a = loss_of(&t, p, in, tg), b = loss_of(&t, back, in, tg);
    CHECK(isfinite(a) && memcmp(&a, &b, sizeof a) == 0, "loss %.9g before export, %.9g after import", a, b);
    free(back);
    free(p);
    param_table_free(&t);
}

/* ---- GPT-2's own layout, written here as Hugging Face's hub file has it ---- */

/* GPT-2's hub config, with its extra fields. */
static void write_gpt2_config(const char *dir, const char *extra) {
    char path[900];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"activation_function\": \"gelu_new\", \"architectures\": [\"GPT2LMHeadModel\"], \"attn_pdrop\": 0.1,"
               " \"bos_token_id\": 50256, \"embd_pdrop\": 0.1, \"eos_token_id\": 50256, \"initializer_range\": 0.02,"
               " \"layer_norm_epsilon\": 1e-05, \"model_type\": \"gpt2\", \"n_ctx\": 32, \"n_embd\": 16, \"n_head\": 2,"
               " \"n_layer\": 2, \"n_positions\": 32, \"resid_pdrop\": 0.1, \"summary_activation\": null,"
               " \"task_specific_params\": {\"text-generation\": {\"do_sample\": true, \"max_length\": 50}},"
               " \"vocab_size\": 300%s}", extra);
    fclose(f);
}

TEST(hf_weights_reads_gpt2s_own_layout_buffers_lm_head_and_bf16) {
    ParamTable t;
    REQUIRE(tiny_table(&t, 300) == 0, "table");
    float *p = malloc(t.total * sizeof *p), *back = malloc(t.total * sizeof *back);
    param_init(&t, p, 3);
    TestTensor ts[64];
    int n = 0;
    for (int i = 0; i < t.count; i++) {
        const ParamInfo *pi = &t.params[i];
        size_t rows = pi->role == ROLE_WTE ? 300 : pi->rows, cols = pi->cols;
        TestTensor *x = &ts[n++];
        snprintf(x->name, sizeof x->name, "%s", pi->name + strlen("transformer.")); /* GPT-2's names */
        x->dtype = "BF16";
        x->d0 = pi->ndim == 1 ? 0 : pi->hf_transposed ? cols : rows;
        x->d1 = pi->ndim == 1 ? cols : pi->hf_transposed ? rows : cols;
        x->bytes = rows * cols * 2;
        uint16_t *d = malloc(x->bytes);
        for (size_t r = 0; r < rows; r++)
            for (size_t c = 0; c < cols; c++) {
                float v = p[pi->offset + r * cols + c];
                d[pi->hf_transposed ? c * rows + r : r * cols + c] = test_to_bf16(v);
            }
        x->data = d;
        /* what the reader must give back: the bf16 value */
        for (size_t k = 0; k < rows * cols; k++) {
            uint32_t b = (uint32_t)test_to_bf16(p[pi->offset + k]) << 16;
            memcpy(&p[pi->offset + k], &b, 4);
        }
        if (pi->role == ROLE_WTE) { /* the tied head, stored again as the hub file does */
            TestTensor *h = &ts[n++];
            *h = *x;
            snprintf(h->name, sizeof h->name, "lm_head.weight");
            h->data = malloc(x->bytes);
            memcpy(h->data, d, x->bytes);
        }
        if (pi->role == ROLE_LN1_W) { /* the causal mask buffer some GPT-2 files carry */
            TestTensor *m = &ts[n++];
            snprintf(m->name, sizeof m->name, "h.%d.attn.bias", pi->layer);
            m->dtype = "F32";
            m->d0 = 32;
            m->d1 = 32;
            m->bytes = 32 * 32 * 4;
            m->data = calloc(32 * 32, 4);
        }
    }
    char path[900], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/model.safetensors", test_tmpdir());
    write_test_safetensors(path, ts, n);
    write_gpt2_config(test_tmpdir(), "");
    GPTConfig cfg;
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    REQUIRE(hf_read_weights(test_tmpdir(), &t, back, err) == 0, "%s", err);
    CHECK(memcmp(p, back, t.total * sizeof *p) == 0, "GPT-2's layout read back other weights");
    /* an lm_head that is not the embedding is an untied model */
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, "lm_head.weight")) ((uint16_t *)ts[i].data)[5] ^= 0x40;
    write_test_safetensors(path, ts, n);
    CHECK(hf_read_weights(test_tmpdir(), &t, back, err) != 0 && strstr(err, "lm_head.weight is not the token embedding"),
          "an untied lm_head: %s", err);
    for (int i = 0; i < n; i++)
        if (!strcmp(ts[i].name, "lm_head.weight")) ((uint16_t *)ts[i].data)[5] ^= 0x40;
    /* a missing tensor, a wrong shape, a foreign tensor */
    int k = 0;
    while (k < n && strcmp(ts[k].name, "h.0.ln_1.weight")) k++;
    REQUIRE(k < n, "no h.0.ln_1.weight");
    write_test_safetensors(path, ts, n - 1);
    CHECK(hf_read_weights(test_tmpdir(), &t, back, err) != 0 && strstr(err, "has no tensor"), "missing tensor: %s", err);
    ts[k].d1 += 1;
    ts[k].bytes += 2;
    ts[k].data = realloc(ts[k].data, ts[k].bytes);
    write_test_safetensors(path, ts, n);
    CHECK(hf_read_weights(test_tmpdir(), &t, back, err) != 0 && strstr(err, "but the model (config.json) needs"), "shape: %s", err);
    ts[k].d1 -= 1;
    ts[k].bytes -= 2;
    snprintf(ts[k].name, sizeof ts[k].name, "model.layers.0.mlp.gate_proj.weight");
    write_test_safetensors(path, ts, n);
    CHECK(hf_read_weights(test_tmpdir(), &t, back, err) != 0 && strstr(err, "that GPT2LMHeadModel does not"),
          "foreign tensor: %s", err);
    for (int i = 0; i < n; i++) free(ts[i].data);
    free(back);
    free(p);
    param_table_free(&t);
}

TEST(hf_weights_config_of_another_model_is_refused_naming_the_field) {
    char err[ERR_LEN];
    GPTConfig cfg;
    const struct {
        const char *extra, *msg;
    } cases[] = {
        {", \"model_type\": \"falcon\"", "model_type falcon is not supported"},
        {", \"activation_function\": \"relu\"", "activation_function relu"},
        {", \"n_inner\": 100", "n_inner is not 4 x n_embd"},
        {", \"tie_word_embeddings\": false", "tie_word_embeddings is false"},
        {", \"layer_norm_epsilon\": 1e-6", "layer_norm_epsilon"},
        {", \"n_layer\": -2", "\"n_layer\" is missing or not a positive integer"},
        {", \"n_head\": 3", "n_head 3 does not divide n_embd 16 (not a GPT-2 this trainer can build"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_gpt2_config(test_tmpdir(), cases[i].extra);
        CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, cases[i].msg),
              "'%s': message '%s' lacks '%s'", cases[i].extra, err, cases[i].msg);
    }
    CHECK(hf_read_config("/nonexistent", &cfg, err) != 0 && strstr(err, "cannot open /nonexistent/config.json"),
          "a missing directory: %s", err);
    /* JSON, but not an object: named, with what to do */
    char path[900];
    snprintf(path, sizeof path, "%s/config.json", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("[]\n", f) >= 0 && fclose(f) == 0, "writing %s", path);
    CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 &&
              strstr(err, "config.json is not a JSON object, as a Hugging Face model directory's config.json is"),
          "an array: %s", err);
    /* the shards' index is named as itself */
    write_gpt2_config(test_tmpdir(), "");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", test_tmpdir());
    REQUIRE((f = fopen(path, "w")) && fputs("[]\n", f) >= 0 && fclose(f) == 0, "writing %s", path);
    char args[1200], shard[900], *out = NULL;
    snprintf(shard, sizeof shard, "%s/eval.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(shard, 100, 300, 2) == 0, "%s", shard);
    snprintf(args, sizeof args, "eval --init-from %s -i %s --device cpu", test_tmpdir(), shard);
    CHECK(run_train(args, &out) == 1 && out && strstr(out, "model.safetensors.index.json is not a JSON object, as a "
                                                           "Hugging Face model directory's model.safetensors.index.json is"),
          "an index that is an array: %s", out);
    free(out);
}

/* GPT2Config's context is n_positions (1024 when absent); n_ctx, which old files carry beside it,
 * is never read. */
TEST(a_gpt2_config_without_n_positions_has_gpt2configs_1024_whatever_n_ctx_says) {
    char path[900], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/config.json", test_tmpdir());
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs("{\"model_type\": \"gpt2\", \"n_ctx\": 32, \"n_embd\": 16, \"n_head\": 2, \"n_layer\": 2, "
                       "\"vocab_size\": 300}", f) >= 0 && fclose(f) == 0, "writing %s", path);
    GPTConfig cfg;
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.max_seq_len == 1024, "context %d, not 1024", cfg.max_seq_len);
}

/* A config.json that is a directory is named as one (its size was read as LONG_MAX). */
TEST(a_config_json_that_is_a_directory_is_refused_naming_it) {
    char dir[800], path[900], err[ERR_LEN];
    snprintf(dir, sizeof dir, "%s/cfgdir", test_tmpdir());
    snprintf(path, sizeof path, "%s/config.json", dir);
    REQUIRE(mkdir(dir, 0755) == 0 && mkdir(path, 0755) == 0, "mkdir %s", path);
    GPTConfig cfg;
    CHECK(hf_read_config(dir, &cfg, err) != 0 && strstr(err, "config.json is a directory"), "%s", err);
}

TEST(a_config_field_of_the_wrong_type_is_refused_naming_the_field_and_both_types) {
    /* every field read has the type transformers writes; another type is a hand-edited or foreign
     * file, and reading around it (31 as "no model_type", 0 as "not false") would guess */
    char err[ERR_LEN];
    GPTConfig cfg;
    const struct {
        const char *extra, *msg;
    } cases[] = {
        {", \"model_type\": 31", "\"model_type\" is a number, expected a string"},
        {", \"tie_word_embeddings\": 0", "\"tie_word_embeddings\" is a number, expected true or false"},
        {", \"activation_function\": false", "\"activation_function\" is false, expected a string"},
        {", \"scale_attn_weights\": \"yes\"", "\"scale_attn_weights\" is a string, expected true or false"},
        {", \"scale_attn_by_inverse_layer_idx\": 1", "\"scale_attn_by_inverse_layer_idx\" is a number, expected true"},
        {", \"layer_norm_epsilon\": \"1e-05\"", "\"layer_norm_epsilon\" is a string, expected a number"},
        {", \"n_inner\": \"64\"", "\"n_inner\" is a string, expected an integer or null"},
        {", \"n_layer\": \"2\"", "\"n_layer\" is a string, expected an integer"},
        {", \"vocab_size\": [300]", "\"vocab_size\" is an array, expected an integer"},
        {", \"n_positions\": null", "\"n_positions\" is null, expected an integer"},
        {", \"model_type\": \"gpt2\\u0000x\"", "\"model_type\" holds a NUL character"},
        /* Python's json reads these as floats, which transformers' sizes refuse */
        {", \"n_embd\": 64.0", "\"n_embd\" is 64 written with a fraction or exponent, expected an integer"},
        {", \"n_layer\": 2e0", "\"n_layer\" is 2 written with a fraction or exponent, expected an integer"},
        {", \"n_inner\": 256.0", "\"n_inner\" is 256 written with a fraction or exponent, expected an integer"},
        {", \"resid_pdrop\": 1.5", "resid_pdrop is 1.5, not a probability from 0 to 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_gpt2_config(test_tmpdir(), cases[i].extra);
        CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, cases[i].msg) && strstr(err, "config.json"),
              "'%s': message '%s' lacks '%s'", cases[i].extra, err, cases[i].msg);
    }
    /* the types transformers writes are taken: n_inner null, booleans, a float epsilon; a field of
     * another family's class (attention_dropout) is not GPT2Config's to check */
    write_gpt2_config(test_tmpdir(), ", \"n_inner\": null, \"tie_word_embeddings\": true, \"scale_attn_weights\": true,"
                                     " \"scale_attn_by_inverse_layer_idx\": false, \"attention_dropout\": 1.5");
    CHECK(hf_read_config(test_tmpdir(), &cfg, err) == 0 && cfg.num_layers == 2, "GPT-2's own types refused: %s", err);
}

/* IEEE half h's value, from its fields (not the reader's bit moves). */
static double half_value(uint16_t h) {
    const int sign = h >> 15, e = h >> 10 & 0x1f, m = h & 0x3ff;
    const double mag = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return sign ? -mag : mag;
}

/* Tensors larger than a core's piece (16 MB), their last piece short, in each dtype: every element
 * back, F16's every bit pattern included. */
TEST(safetensors_reads_every_element_of_tensors_over_several_pieces_in_f32_bf16_and_f16) {
    const size_t nf = ((size_t)4 << 20) + 5, nh = ((size_t)8 << 20) + 3, nb = ((size_t)8 << 20) + 7;
    float *f = malloc(nf * 4);
    uint16_t *h = malloc(nh * 2), *b = malloc(nb * 2);
    REQUIRE(f && h && b, "memory");
    for (size_t i = 0; i < nf; i++) f[i] = (float)i * 0.25f - 1000.0f;
    for (size_t i = 0; i < nh; i++) h[i] = (uint16_t)(i * 40503u);
    for (size_t i = 0; i < nb; i++) b[i] = (uint16_t)(i * 7919u + 3);
    TestTensor ts[3] = {{.dtype = "F32", .d0 = 0, .d1 = nf, .bytes = nf * 4, .data = f},
                        {.dtype = "F16", .d0 = 0, .d1 = nh, .bytes = nh * 2, .data = h},
                        {.dtype = "BF16", .d0 = 0, .d1 = nb, .bytes = nb * 2, .data = b}};
    snprintf(ts[0].name, sizeof ts[0].name, "f32");
    snprintf(ts[1].name, sizeof ts[1].name, "f16");
    snprintf(ts[2].name, sizeof ts[2].name, "bf16");
    char path[900], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/pieces.safetensors", test_tmpdir());
    write_test_safetensors(path, ts, 3);
    StFile st;
    REQUIRE(st_open(&st, path, err) == 0, "%s", err);
    float *out = malloc(nb * 4);
    REQUIRE(out, "memory");
    for (size_t k = 0; k < st.count; k++) {
        const StTensor *t = &st.tensors[k];
        REQUIRE(st_read_f32(&st, t, out, err) == 0, "%s: %s", t->name, err);
        size_t wrong = 0, first = 0;
        if (!strcmp(t->name, "f32")) {
            for (size_t i = 0; i < nf; i++)
                if (out[i] != f[i] && !wrong++) first = i;
        } else if (!strcmp(t->name, "f16")) {
            for (size_t i = 0; i < nh; i++) {
                const double want = half_value(h[i]);
                const int ok = isnan(want) ? isnan(out[i]) : out[i] == want && !signbit(out[i]) == !signbit(want);
                if (!ok && !wrong++) first = i;
            }
        } else {
            for (size_t i = 0; i < nb; i++) {
                uint32_t bits;
                memcpy(&bits, &out[i], 4);
                if (bits != (uint32_t)b[i] << 16 && !wrong++) first = i;
            }
        }
        CHECK(wrong == 0, "%s: %zu elements wrong, the first at %zu", t->name, wrong, first);
    }
    st_close(&st);
    free(out), free(f), free(h), free(b);
}

/* A safetensors file of the given header text and data_len bytes of data (zeros). */
static void write_raw_safetensors(const char *path, const char *header, size_t data_len) {
    FILE *f = fopen(path, "wb");
    uint64_t hl = strlen(header);
    fwrite(&hl, 8, 1, f);
    fwrite(header, 1, hl, f);
    for (size_t i = 0; i < data_len; i++) fputc(0, f);
    fclose(f);
}

TEST(a_safetensors_file_whose_data_is_not_exactly_its_tensors_is_refused) {
    ParamTable t;
    REQUIRE(tiny_table(&t, 300) == 0, "table");
    float *p = malloc(t.total * sizeof *p);
    param_init(&t, p, 5);
    TrainState st = {.step = 2};
    char err[ERR_LEN], dir[800], path[900];
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p, p, &st, 1, err) == 0, "%s", err);
    snprintf(dir, sizeof dir, "%s/step_00000002", test_tmpdir());
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    REQUIRE(hf_read_weights(dir, &t, p, err) == 0, "the exported file: %s", err);
    /* bytes after the last tensor: a corrupt or concatenated file */
    FILE *f = fopen(path, "ab");
    REQUIRE(f && fputs("tail", f) >= 0 && fclose(f) == 0, "appending to %s", path);
    CHECK(hf_read_weights(dir, &t, p, err) != 0 && strstr(err, "model.safetensors has 4 bytes after its last tensor"),
          "trailing bytes: %s", err);
    const struct {
        const char *what, *header;
        size_t data_len;
        const char *msg;
    } cases[] = {
        {"overlap", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"h.0.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, "tensors h.0.ln_1.weight and h.0.ln_1.bias overlap"},
        {"a name twice", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                         "\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         8, "tensor h.0.ln_1.weight is listed twice in the header"},
        {"hole", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                 "\"h.0.ln_1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
         20, "bytes 8 to 12 of the data belong to no tensor"},
        {"past the end", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8,
         "tensor h.0.ln_1.weight ends at byte 16 of the data, past its end at 8"},
        {"bytes for the shape", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}",
         8, "tensor h.0.ln_1.weight holds 8 bytes but F32 [3] takes 12"},
        {"a buffer's bytes", "{\"h.0.attn.bias\":{\"dtype\":\"F32\",\"shape\":[1,1,2,2],\"data_offsets\":[0,8]}}",
         8, "tensor h.0.attn.bias holds 8 bytes but F32 [1, 1, 2, 2] takes 16"},
        {"unknown dtype", "{\"h.0.ln_1.weight\":{\"dtype\":\"F31\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         "tensor h.0.ln_1.weight has dtype F31, which safetensors does not define"},
        {"no offsets", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8,
         "tensor h.0.ln_1.weight has no valid dtype, shape or data_offsets"},
        /* safetensors' own reader takes integers only: 2.0 is no dimension */
        {"a float dimension", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
         "tensor h.0.ln_1.weight has no valid dtype, shape or data_offsets"},
        {"a float offset", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8e0]}}", 8,
         "tensor h.0.ln_1.weight has no valid dtype, shape or data_offsets"},
        {"a header that is an array", "[1, 2]", 8, "the safetensors header is not a JSON object"},
        /* a NUL inside a name or dtype: the text before it is not the name or dtype the file gives */
        {"a NUL in a name", "{\"h.0.ln_1.weight\\u0000junk\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         8, "the tensor name \"h.0.ln_1.weight\" goes on past a NUL character"},
        {"a NUL in a dtype", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\\u0000x\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         8, "tensor h.0.ln_1.weight has no valid dtype, shape or data_offsets"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_raw_safetensors(path, cases[i].header, cases[i].data_len);
        CHECK(hf_read_weights(dir, &t, p, err) != 0 && strstr(err, cases[i].msg) && strstr(err, "model.safetensors"),
              "%s: message '%s' lacks '%s'", cases[i].what, err, cases[i].msg);
    }
    /* a directory where the file should be */
    REQUIRE(remove(path) == 0 && mkdir(path, 0755) == 0, "making %s a directory", path);
    CHECK(hf_read_weights(dir, &t, p, err) != 0 && strstr(err, "model.safetensors is a directory, not a safetensors file"),
          "a directory: %s", err);
    REQUIRE(rmdir(path) == 0, "removing %s", path);
    free(p);
    param_table_free(&t);
}

/* ---- the trainer ---- */

static void run_ok(const char *args, char **out) {
    int rc = run_train(args, out);
    CHECK(rc == 0, "./train %s: exit %d: %s", args, rc, *out ? *out : "");
}

/* The value after "step <step> | val loss " in the output, or NAN. */
static float val_loss_at(const char *out, int step) {
    char key[64];
    snprintf(key, sizeof key, "step %5d | val loss ", step);
    const char *p = out ? strstr(out, key) : NULL;
    return p ? strtof(p + strlen(key), NULL) : NAN;
}

TEST(train_init_from_continues_from_the_exported_weights_and_refuses_other_shapes) {
    char shard[800], args[2400], ck[900];
    snprintf(shard, sizeof shard, "%s/data.bin", test_tmpdir());
    REQUIRE(write_pattern_shard(shard, 20000, 300, 1) == 0, "shard");
    const char *common = "--device cpu -e tiny -v 300 -b 2 -t 32 --max-seq-len 64 -s 0 --val-batches 4";
    char *out = NULL;
    snprintf(args, sizeof args, "-i %s -j %s %s -x 6 --val-every 6 -o %s/a", shard, shard, common, test_tmpdir());
    run_ok(args, &out);
    float trained = val_loss_at(out, 6);
    free(out);
    snprintf(ck, sizeof ck, "%s/a/step_00000006", test_tmpdir());
    /* the new run's validation before its first step is the exported model's, bit for bit */
    snprintf(args, sizeof args, "-i %s -j %s %s -x 1 --val-every 1 --init-from %s -o %s/b", shard, shard, common, ck,
             test_tmpdir());
    run_ok(args, &out);
    float imported = val_loss_at(out, 0);
    CHECK(out && strstr(out, "init: weights from"), "no init line: %s", out);
    CHECK(!isnan(trained) && trained == imported, "validation loss %.6f after training, %.6f from --init-from", trained,
          imported);
    free(out);
    const struct {
        const char *flags, *msg;
    } cases[] = {
        {"-e d6", "has layers 2 but the preset -e gives 6 (leave out -e: the checkpoint gives the shape)"},
        {"-e tiny --dim 64 --heads 2", "has width 128 but the flags give 64 (pass --dim 128)"},
        {"-e tiny --max-seq-len 128", "has context (n_positions) 64 but the flags give 128 (pass --max-seq-len 64)"},
        {"-e tiny --max-seq-len 64 -v 512", "has vocabulary 300 but the flags give 512 (pass -v 300)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "-i %s --device cpu -b 2 -t 32 -x 1 %s -v 300 %s --init-from %s -o %s/c", shard,
                 cases[i].flags, strstr(cases[i].flags, "-v 512") ? "-v 512" : "", ck, test_tmpdir());
        int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, cases[i].msg), "'%s': (%d) %s", cases[i].flags, rc, out);
        free(out);
    }
    /* a config.json of a 2^30-token vocabulary beside these weights: the tensor that disagrees is named
     * from the files' headers, before 512 GB would be asked for a model of the config's sizes */
    char big[900], from[1000], to[1000];
    snprintf(big, sizeof big, "%s/big_vocab", test_tmpdir());
    REQUIRE(mkdir(big, 0755) == 0, "mkdir %s", big);
    snprintf(from, sizeof from, "%s/model.safetensors", ck);
    snprintf(to, sizeof to, "%s/model.safetensors", big);
    REQUIRE(symlink(from, to) == 0, "link %s", to);
    const char *edit[] = {"\"vocab_size\": 300", "\"vocab_size\": 1073741824"};
    snprintf(from, sizeof from, "%s/config.json", ck);
    snprintf(to, sizeof to, "%s/config.json", big);
    REQUIRE(write_edited_copy(from, to, edit, 1) == 0, "config.json of %s", big);
    const char *commands[] = {"-i %s --device cpu -b 2 -t 32 -x 1 --init-from %s -o %s/d",
                              "eval -i %s --device cpu -t 32 --init-from %s", "sample --device cpu -G 2 --checkpoint %s"};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
        if (i < 2)
            snprintf(args, sizeof args, commands[i], shard, big, test_tmpdir());
        else
            snprintf(args, sizeof args, commands[i], big);
        int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, "is [300, 128] but the model (config.json) needs [1073741824, 128]") &&
                  !strstr(out, "memory"),
              "%s: (%d) %s", args, rc, out);
        free(out);
    }
    /* GPT-2's files set dropout 0.1, which training here does not apply: said, and the run goes on */
    const char *dropout[] = {"\"resid_pdrop\": 0.0", "\"resid_pdrop\": 0.1", "\"attn_pdrop\": 0.0", "\"attn_pdrop\": 0.25"};
    snprintf(to, sizeof to, "%s/config.json", big);
    REQUIRE(remove(to) == 0 && write_edited_copy(from, to, dropout, 2) == 0, "config.json of %s", big);
    snprintf(args, sizeof args, "-i %s --device cpu -b 2 -t 32 -x 1 --init-from %s -o %s/e", shard, big, test_tmpdir());
    run_ok(args, &out);
    CHECK(out && strstr(out, "note: --init-from's config.json sets dropout (resid_pdrop 0.1, attn_pdrop 0.25), which "
                             "training here does not apply"),
          "no dropout note: %s", out);
    free(out);
}
