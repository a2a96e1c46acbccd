/* Hugging Face checkpoints of Llama, Qwen2, Qwen3 and Gemma 3 in and out: a tiny checkpoint of each family,
 * written here as transformers lays it out (nn.Linear [out, in], q/k/v and gate/up as their own
 * tensors, BF16 or F32, one file or shards with an index), is read, evaluated with ./train eval,
 * fine-tuned, exported and read again; what is not such a checkpoint is refused naming the field or
 * the tensor; a resumed Llama or Gemma 3 run continues bit for bit; version 4 and 5 state files still
 * load; a multimodal Gemma 3 checkpoint's text model is read under either prefix. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/err.h"
#include "common/rng.h"
#include "common/safetensors.h"
#include "data/shard.h"
#include "model/backend.h"
#include "model/train/checkpoint.h"
#include "model/train/eval.h"
#include "model/train/hf_weights.h"
#include "tests/test.h"
#include "tests/test_util.h"

/* A tiny model of a family and how its checkpoint is written. */
typedef struct {
    ModelFamily family;
    int L, NH, NKV, hd, C, F, V, maxT;
    int untied;
    RopeParams rope;
    float eps;
    const char *rope_json; /* the rope fields of config.json, as transformers 4 or 5 writes them */
    int bf16, shards;
    /* Gemma 3: the window, which layers slide (layer_types), query_pre_attn_scalar, the local base */
    int window;
    unsigned char sliding[4];
    float scalar;
    double local_theta;
} TinyModel;

/* Llama 3 with an untied head, GQA, hd·NH != C and llama3 RoPE scaling whose original context is
 * short enough that the scaling changes the frequencies a 16-token window uses; BF16 in two shards. */
static const TinyModel LLAMA = {FAMILY_LLAMA, 2, 4, 2, 6, 20, 36, 300, 64, 1,
                                {5e5, ROPE_SCALING_LLAMA3, 8.0, 1.0, 4.0, 16.0}, 1e-5f,
                                "\"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, "
                                "\"original_max_position_embeddings\": 16, \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0",
                                1, 2, 0, {0}, 0, 0};
/* Qwen3 tied, with QK-norm, written as transformers 5 does (rope_parameters); F32, one file. */
static const TinyModel QWEN3 = {FAMILY_QWEN3, 2, 4, 2, 8, 24, 40, 300, 64, 0,
                                {1e6, ROPE_SCALING_NONE, 0, 0, 0, 0}, 1e-6f,
                                "\"rope_parameters\": {\"rope_theta\": 1000000.0, \"rope_type\": \"default\"}", 0, 1, 0, {0}, 0, 0};
/* Qwen2 with its q/k/v biases, untied; F32 in two shards. */
static const TinyModel QWEN2 = {FAMILY_QWEN2, 2, 4, 1, 4, 16, 24, 300, 64, 1,
                                {1e6, ROPE_SCALING_NONE, 0, 0, 0, 0}, 1e-6f,
                                "\"rope_scaling\": null, \"rope_theta\": 1000000.0", 0, 2, 0, {0}, 0, 0};

/* Gemma 3 with sliding layers whose window (5) is shorter than the 16-token sequence, global and local
 * layers mixed by layer_types, QK-norm and sandwich norms, GQA, hd·NH != C, linear RoPE scaling on the
 * global layers, a local base and a query_pre_attn_scalar of its own; tied, BF16, one file, config.json
 * as transformers 4 writes it. */
static const TinyModel GEMMA3 = {FAMILY_GEMMA3, 3, 4, 2, 8, 20, 28, 300, 64, 0,
                                 {1e6, ROPE_SCALING_LINEAR, 4.0, 0, 0, 0}, 1e-6f,
                                 "\"rope_local_base_freq\": 20000.0, \"rope_scaling\": {\"factor\": 4.0, \"rope_type\": "
                                 "\"linear\"}, \"rope_theta\": 1000000.0",
                                 1, 1, 5, {1, 0, 1}, 12.0f, 2e4};
/* The same in F32 shards, config.json as transformers 5 writes it (rope_parameters per layer type). */
static const TinyModel GEMMA3_V5 = {FAMILY_GEMMA3, 3, 4, 2, 8, 20, 28, 300, 64, 0,
                                    {1e6, ROPE_SCALING_LINEAR, 4.0, 0, 0, 0}, 1e-6f,
                                    "\"rope_parameters\": {\"full_attention\": {\"factor\": 4.0, \"rope_theta\": 1000000.0, "
                                    "\"rope_type\": \"linear\"}, \"sliding_attention\": {\"rope_theta\": 20000.0, "
                                    "\"rope_type\": \"default\"}}",
                                    0, 2, 5, {1, 0, 1}, 12.0f, 2e4};

static GPTConfig config_of(const TinyModel *m) {
    GPTConfig c;
    memset(&c, 0, sizeof c);
    gpt_family_defaults(&c, m->family);
    c.num_layers = m->L, c.num_heads = m->NH, c.num_kv_heads = m->NKV, c.head_dim = m->hd;
    c.dim = m->C, c.ffn_dim = m->F, c.vocab_size = m->V, c.max_seq_len = m->maxT;
    c.untied_head = m->untied, c.rope = m->rope, c.norm_eps = m->eps;
    if (m->family == FAMILY_GEMMA3) {
        c.sliding_window = m->window, c.sliding_window_pattern = 0, c.query_pre_attn_scalar = m->scalar;
        c.rope_local_theta = m->local_theta;
        c.embed_scale = m->bf16 ? EMBED_SCALE_BF16 : EMBED_SCALE_F32; /* its torch_dtype's rounding */
        memcpy(c.layer_sliding, m->sliding, sizeof m->sliding);
    }
    gpt_config_finish(&c);
    return c;
}

/* Gemma3TextConfig's fields of m, extra appended (a later key wins), without the braces. */
static void gemma3_fields(FILE *f, const TinyModel *m, const char *extra) {
    fprintf(f, "\"model_type\": \"gemma3_text\", \"attention_bias\": false, \"attention_dropout\": 0.0, "
               "\"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"eos_token_id\": 1, \"final_logit_softcapping\": null, "
               "\"head_dim\": %d, \"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": %d, \"intermediate_size\": %d, "
               "\"layer_types\": [", m->hd, m->C, m->F);
    for (int l = 0; l < m->L; l++)
        fprintf(f, "%s\"%s\"", l ? ", " : "", m->sliding[l] ? "sliding_attention" : "full_attention");
    fprintf(f, "], \"max_position_embeddings\": %d, \"num_attention_heads\": %d, \"num_hidden_layers\": %d, "
               "\"num_key_value_heads\": %d, \"pad_token_id\": 0, \"query_pre_attn_scalar\": %g, \"rms_norm_eps\": %g, "
               "%s, \"sliding_window\": %d, \"tie_word_embeddings\": %s, \"use_bidirectional_attention\": false, "
               "\"vocab_size\": %d%s",
            m->maxT, m->NH, m->L, m->NKV, (double)m->scalar, m->eps, m->rope_json, m->window,
            m->untied ? "false" : "true", m->V, extra);
}

/* A Gemma3ForCausalLM's config.json, or with multimodal a Gemma3ForConditionalGeneration's, whose
 * text model is its text_config. */
static void write_gemma3_config(const char *dir, const TinyModel *m, const char *extra, int multimodal) {
    char path[900];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (multimodal) /* its dtype in the outer config alone, as released multimodal checkpoints have it */
        fprintf(f, "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\", "
                   "\"torch_dtype\": \"%s\", \"boi_token_index\": 255999, \"mm_tokens_per_image\": 256, \"vision_config\": {\"hidden_size\": 16, "
                   "\"model_type\": \"siglip_vision_model\"}, \"text_config\": {", m->bf16 ? "bfloat16" : "float32");
    else
        fprintf(f, "{\"architectures\": [\"Gemma3ForCausalLM\"], \"torch_dtype\": \"%s\", ", m->bf16 ? "bfloat16" : "float32");
    gemma3_fields(f, m, extra);
    fprintf(f, multimodal ? "}}" : "}");
    fclose(f);
}

static void write_config(const char *dir, const TinyModel *m, const char *extra) {
    static const char *arch[] = {"GPT2LMHeadModel", "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    char path[900], head_dim[32] = "";
    if (m->family == FAMILY_GEMMA3) {
        write_gemma3_config(dir, m, extra, 0);
        return;
    }
    if (m->hd) snprintf(head_dim, sizeof head_dim, "\"head_dim\": %d, ", m->hd); /* 0: left out */
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"architectures\": [\"%s\"], \"model_type\": \"%s\", \"attention_dropout\": 0.0, \"bos_token_id\": 1, "
               "\"eos_token_id\": 2, %s\"hidden_act\": \"silu\", \"hidden_size\": %d, "
               "\"initializer_range\": 0.02, \"intermediate_size\": %d, \"max_position_embeddings\": %d, "
               "\"num_attention_heads\": %d, \"num_hidden_layers\": %d, \"num_key_value_heads\": %d, "
               "\"rms_norm_eps\": %g, %s, \"tie_word_embeddings\": %s, \"torch_dtype\": \"%s\", "
               "\"use_cache\": true, \"vocab_size\": %d%s}",
            arch[m->family], gpt_family_name(m->family), head_dim, m->C, m->F, m->maxT, m->NH, m->L, m->NKV, m->eps,
            m->rope_json, m->untied ? "false" : "true", m->bf16 ? "bfloat16" : "float32", m->V, extra);
    fclose(f);
}

/* Weights in our layout for m: N(0, 0.2), padded vocabulary rows 0, rounded to bf16 when the
 * checkpoint is BF16 so that the file holds them exactly. */
static float *tiny_weights(const ParamTable *t, const TinyModel *m, uint64_t seed) {
    float *p = malloc(t->total * sizeof *p);
    Rng r;
    rng_seed(&r, seed);
    fill_normal(p, t->total, 0.2f, &r);
    const ParamRole vocab[2] = {ROLE_WTE, ROLE_LM_HEAD};
    for (int k = 0; k < 2; k++) {
        const ParamInfo *pi = param_whole(t, vocab[k]);
        if (pi) memset(p + pi->offset + (size_t)m->V * pi->cols, 0, (pi->numel - (size_t)m->V * pi->cols) * sizeof *p);
    }
    for (size_t i = 0; m->bf16 && i < t->total; i++) {
        uint32_t b = (uint32_t)test_to_bf16(p[i]) << 16;
        memcpy(&p[i], &b, 4);
    }
    return p;
}

static void add_tensor(TestTensor *ts, int *n, const TinyModel *m, const char *name, size_t d0, size_t d1,
                       const float *x) {
    TestTensor *h = &ts[(*n)++];
    snprintf(h->name, sizeof h->name, "%s", name);
    const size_t count = (d0 ? d0 : 1) * d1;
    h->d0 = d0, h->d1 = d1, h->dtype = m->bf16 ? "BF16" : "F32";
    h->bytes = count * (m->bf16 ? 2 : 4);
    h->data = malloc(h->bytes);
    for (size_t i = 0; i < count; i++) {
        if (m->bf16) ((uint16_t *)h->data)[i] = test_to_bf16(x[i]);
        else ((float *)h->data)[i] = x[i];
    }
}

/* The HF tensors of params, named and cut by hand as transformers' modules hold them (not through
 * the table's part list, so that the table's names are checked too); how many into ts. */
static int hf_tensors_under(const ParamTable *t, const TinyModel *m, float *params, TestTensor *ts, const char *body) {
    int n = 0;
    char name[160];
    const size_t C = (size_t)m->C, q = (size_t)m->NH * m->hd, kv = (size_t)m->NKV * m->hd, F = (size_t)m->F;
    const int gemma = m->family == FAMILY_GEMMA3;
    snprintf(name, sizeof name, "%sembed_tokens.weight", body);
    add_tensor(ts, &n, m, name, (size_t)m->V, C, whole_tensor(t, params, ROLE_WTE));
    for (int l = 0; l < m->L; l++) {
        LayerTensors lt = layer_tensors(t, params, l);
#define LAYER(suffix, d0, d1, x) \
    snprintf(name, sizeof name, "%slayers.%d.%s", body, l, suffix), add_tensor(ts, &n, m, name, d0, d1, x)
        LAYER("input_layernorm.weight", 0, C, lt.ln1w);
        LAYER("self_attn.q_proj.weight", q, C, lt.qkvw);
        LAYER("self_attn.k_proj.weight", kv, C, lt.qkvw + q * C);
        LAYER("self_attn.v_proj.weight", kv, C, lt.qkvw + (q + kv) * C);
        if (m->family == FAMILY_QWEN2) {
            LAYER("self_attn.q_proj.bias", 0, q, lt.qkvb);
            LAYER("self_attn.k_proj.bias", 0, kv, lt.qkvb + q);
            LAYER("self_attn.v_proj.bias", 0, kv, lt.qkvb + q + kv);
        }
        if (m->family == FAMILY_QWEN3 || gemma) {
            LAYER("self_attn.q_norm.weight", 0, (size_t)m->hd, lt.qnormw);
            LAYER("self_attn.k_norm.weight", 0, (size_t)m->hd, lt.knormw);
        }
        LAYER("self_attn.o_proj.weight", C, q, lt.attprojw);
        /* Gemma's post_attention_layernorm norms the attention's output; pre_feedforward_layernorm is
         * the MLP's input norm, Llama's post_attention_layernorm */
        if (gemma) LAYER("post_attention_layernorm.weight", 0, C, lt.attpostw);
        LAYER(gemma ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight", 0, C, lt.ln2w);
        LAYER("mlp.gate_proj.weight", F, C, lt.fcw);
        LAYER("mlp.up_proj.weight", F, C, lt.fcw + F * C);
        LAYER("mlp.down_proj.weight", C, F, lt.fcprojw);
        if (gemma) LAYER("post_feedforward_layernorm.weight", 0, C, lt.mlppostw);
#undef LAYER
    }
    snprintf(name, sizeof name, "%snorm.weight", body);
    add_tensor(ts, &n, m, name, 0, C, whole_tensor(t, params, ROLE_LNF_W));
    if (m->untied) add_tensor(ts, &n, m, "lm_head.weight", (size_t)m->V, C, whole_tensor(t, params, ROLE_LM_HEAD));
    return n;
}

static int hf_tensors(const ParamTable *t, const TinyModel *m, float *params, TestTensor *ts) {
    return hf_tensors_under(t, m, params, ts, "model.");
}

/* The checkpoint directory: config.json and the tensors, in reverse order (a reader must not rely
 * on the table's), in m->shards files with an index when more than one. */
static void write_checkpoint(const char *dir, const TinyModel *m, TestTensor *ts, int n) {
    char path[900];
    write_config(dir, m, "");
    if (m->shards == 1) {
        TestTensor rev[128];
        for (int i = 0; i < n; i++) rev[i] = ts[n - 1 - i];
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        write_test_safetensors(path, rev, n);
        return;
    }
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *idx = fopen(path, "w");
    fprintf(idx, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
    const int half = n / 2;
    for (int s = 0; s < 2; s++) {
        const int from = s ? half : 0, to = s ? n : half;
        snprintf(path, sizeof path, "%s/model-0000%d-of-00002.safetensors", dir, s + 1);
        write_test_safetensors(path, ts + from, to - from);
        for (int i = from; i < to; i++)
            fprintf(idx, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", ts[i].name, s + 1);
    }
    fprintf(idx, "}}");
    fclose(idx);
}

static void free_tensors(TestTensor *ts, int n) {
    for (int i = 0; i < n; i++) free(ts[i].data);
}

/* Gemma 3's switches compared (the layers that slide, however config.json gave them); both into msg. */
static int same_gemma3_switches(const GPTConfig *a, const GPTConfig *b, char *msg, size_t n) {
    int layers = a->num_layers == b->num_layers;
    for (int l = 0; layers && l < a->num_layers; l++) layers = gpt_layer_is_sliding(a, l) == gpt_layer_is_sliding(b, l);
    snprintf(msg, n, " sandwich %d/%d embed_scale %d/%d scalar %g/%g window %d/%d layers %s local %g/%g pad %d:%d/%d:%d "
             "cap %g/%g", a->sandwich_norm, b->sandwich_norm, a->embed_scale, b->embed_scale, a->query_pre_attn_scalar,
             b->query_pre_attn_scalar, a->sliding_window, b->sliding_window, layers ? "same" : "differ",
             a->rope_local_theta, b->rope_local_theta, a->has_pad_token, a->pad_token_id, b->has_pad_token,
             b->pad_token_id, a->logit_softcap, b->logit_softcap);
    return a->sandwich_norm == b->sandwich_norm && a->embed_scale == b->embed_scale &&
           a->query_pre_attn_scalar == b->query_pre_attn_scalar && a->sliding_window == b->sliding_window && layers &&
           a->rope_local_theta == b->rope_local_theta && a->has_pad_token == b->has_pad_token &&
           a->pad_token_id == b->pad_token_id && a->logit_softcap == b->logit_softcap;
}

/* Every field of the config a block reads, compared; what differs into msg. */
static int same_config(const GPTConfig *a, const GPTConfig *b, char *msg, size_t n) {
    snprintf(msg, n, "family %d/%d L %d/%d NH %d/%d NKV %d/%d hd %d/%d C %d/%d F %d/%d V %d/%d T %d/%d untied %d/%d "
             "qk %d/%d bias %d/%d eps %g/%g theta %g/%g scaling %d/%d factor %g/%g lo %g/%g hi %g/%g orig %g/%g",
             a->family, b->family, a->num_layers, b->num_layers, a->num_heads, b->num_heads, a->num_kv_heads,
             b->num_kv_heads, a->head_dim, b->head_dim, a->dim, b->dim, a->ffn_dim, b->ffn_dim, a->vocab_size,
             b->vocab_size, a->max_seq_len, b->max_seq_len, a->untied_head, b->untied_head, a->qk_norm, b->qk_norm,
             a->qkv_bias, b->qkv_bias, a->norm_eps, b->norm_eps, a->rope.theta, b->rope.theta, a->rope.scaling,
             b->rope.scaling, a->rope.factor, b->rope.factor, a->rope.low_freq_factor, b->rope.low_freq_factor,
             a->rope.high_freq_factor, b->rope.high_freq_factor, a->rope.original_max_position_embeddings,
             b->rope.original_max_position_embeddings);
    return a->family == b->family && a->num_layers == b->num_layers && a->num_heads == b->num_heads &&
           a->num_kv_heads == b->num_kv_heads && a->head_dim == b->head_dim && a->dim == b->dim &&
           a->ffn_dim == b->ffn_dim && a->vocab_size == b->vocab_size && a->max_seq_len == b->max_seq_len &&
           a->untied_head == b->untied_head && a->qk_norm == b->qk_norm && a->qkv_bias == b->qkv_bias &&
           a->norm_eps == b->norm_eps && a->norm == b->norm && a->mlp == b->mlp && a->positions == b->positions &&
           memcmp(&a->rope, &b->rope, sizeof a->rope) == 0 && same_gemma3_switches(a, b, msg + strlen(msg), n - strlen(msg));
}

/* A token shard of n tokens with a learnable pattern, and its tokens. */
static uint32_t *write_tokens(const char *path, uint64_t n, uint32_t V) {
    uint32_t *tok = malloc(n * sizeof *tok);
    Rng r;
    rng_seed(&r, 5);
    for (uint64_t i = 0; i < n; i++) tok[i] = i % 3 == 2 ? (tok[i - 1] * 7 + 3) % V : (uint32_t)rng_below(&r, V);
    char err[ERR_LEN];
    if (shard_write(path, tok, n, V, 0, err) != 0) fprintf(stderr, "%s\n", err);
    return tok;
}

/* The mean loss of params over tokens in windows of T, computed here on the CPU backend. */
static double eval_here(const ParamTable *t, const float *params, const uint32_t *tok, uint64_t n, int T) {
    char err[ERR_LEN];
    Backend *be = backend_cpu_create(t, 2, T, OUTPUT_FUSED, OPTIMIZER_STATE_FP32, 1, NULL, err);
    if (!be) return NAN;
    be->ops->write_state(be, params, NULL, NULL);
    double mean = NAN;
    if (eval_mean_loss(be, tok, n, &mean, err) != 0) fprintf(stderr, "%s\n", err);
    be->ops->destroy(be);
    return mean;
}

/* `./train eval --init-from dir` on shard: its loss line, parsed (NAN when missing). */
static double eval_cli(const char *dir, const char *shard, char **out) {
    char args[2400];
    snprintf(args, sizeof args, "eval --init-from %s -i %s -t 16 -b 2 --device cpu", dir, shard);
    int rc = run_train(args, out);
    const char *line = *out ? strstr(*out, "loss ") : NULL;
    double loss;
    return rc == 0 && line && sscanf(line, "loss %lf", &loss) == 1 ? loss : NAN;
}

/* A tensor's shape in a safetensors file as [d0, d1] (d1 0 for a vector); 0 when absent. */
static int stored_shape(const char *path, const char *name, int64_t *d0, int64_t *d1) {
    StFile f;
    char err[ERR_LEN];
    if (st_open(&f, path, err) != 0) return 0;
    int found = 0;
    for (size_t i = 0; i < f.count && !found; i++)
        if (strcmp(f.tensors[i].name, name) == 0) {
            found = 1;
            *d0 = f.tensors[i].shape[0];
            *d1 = f.tensors[i].ndim == 2 ? f.tensors[i].shape[1] : 0;
        }
    st_close(&f);
    return found;
}

/* The round trip of one family: written, read, evaluated, fine-tuned, exported, read again. */
static void round_trip(const TinyModel *m, const char *label) {
    char dir[800], shard[800], run[800], exported[900], args[2400], msg[1024], err[ERR_LEN];
    snprintf(dir, sizeof dir, "%s/%s-hf", test_tmpdir(), label);
    snprintf(shard, sizeof shard, "%s/%s.bin", test_tmpdir(), label);
    snprintf(run, sizeof run, "%s/%s-run", test_tmpdir(), label);
    snprintf(exported, sizeof exported, "%s/step_00000003", run);
    snprintf(args, sizeof args, "mkdir -p %s", dir);
    REQUIRE(system(args) == 0, "mkdir");
    const GPTConfig want = config_of(m);
    ParamTable t;
    REQUIRE(param_table_build(&t, &want, err) == 0, "%s", err);
    float *params = tiny_weights(&t, m, 11), *back = malloc(t.total * sizeof *back);
    float *mv = malloc(2 * t.total * sizeof *mv);
    TestTensor ts[128];
    const int n = hf_tensors(&t, m, params, ts);
    write_checkpoint(dir, m, ts, n);
    free_tensors(ts, n);
    const uint64_t ntok = 700;
    uint32_t *tok = write_tokens(shard, ntok, (uint32_t)m->V);

    /* read: the config and every weight as written */
    GPTConfig got;
    REQUIRE(hf_read_config(dir, &got, err) == 0, "%s: %s", label, err);
    CHECK(same_config(&got, &want, msg, sizeof msg), "%s: config read as (got/want) %s", label, msg);
    REQUIRE(hf_read_weights(dir, &t, back, err) == 0, "%s: %s", label, err);
    CHECK(memcmp(back, params, t.total * sizeof *back) == 0, "%s: the weights read differ from those written", label);

    /* evaluated by ./train eval as here */
    char *out = NULL;
    const double here = eval_here(&t, params, tok, ntok, 16), cli = eval_cli(dir, shard, &out);
    CHECK(isfinite(here) && fabs(cli - here) <= 1e-6 * fabs(here) + 1e-6, "%s: ./train eval %.7f, here %.7f: %s",
          label, cli, here, out);
    free(out);

    /* fine-tuned from it with no shape flag: the checkpoint's shape and vocabulary hold */
    snprintf(args, sizeof args, "--device cpu --init-from %s -i %s -b 2 -t 16 -x 3 --warmup 0 -l 1e-2 -s 0 "
             "--val-every 0 -o %s", dir, shard, run);
    REQUIRE(run_train(args, &out) == 0, "%s: fine-tuning failed: %s", label, out);
    free(out);

    /* exported: the same config, the weights of the state file, HF names and shapes */
    REQUIRE(hf_read_config(exported, &got, err) == 0, "%s: %s", label, err);
    CHECK(same_config(&got, &want, msg, sizeof msg), "%s: exported config read as (got/want) %s", label, msg);
    TrainState st;
    REQUIRE(checkpoint_load_latest(run, &t, params, mv, mv + t.total, &st, err) == 0, "%s: %s", label, err);
    REQUIRE(hf_read_weights(exported, &t, back, err) == 0, "%s: %s", label, err);
    CHECK(st.step == 3 && memcmp(back, params, t.total * sizeof *back) == 0,
          "%s: the exported weights differ from the state file's", label);
    snprintf(args, sizeof args, "%s/model.safetensors", exported);
    int64_t d0 = 0, d1 = 0;
    CHECK(stored_shape(args, "model.layers.1.self_attn.k_proj.weight", &d0, &d1) && d0 == m->NKV * m->hd && d1 == m->C,
          "%s: exported k_proj is [%lld, %lld]", label, (long long)d0, (long long)d1);
    CHECK(stored_shape(args, "model.embed_tokens.weight", &d0, &d1) && d0 == m->V, "%s: exported embedding has %lld rows",
          label, (long long)d0);
    CHECK(stored_shape(args, "lm_head.weight", &d0, &d1) == m->untied, "%s: lm_head.weight %s", label,
          m->untied ? "missing from an untied model" : "written for a tied model");
    const double tuned_here = eval_here(&t, params, tok, ntok, 16), tuned_cli = eval_cli(exported, shard, &out);
    CHECK(isfinite(tuned_here) && fabs(tuned_cli - tuned_here) <= 1e-6 * fabs(tuned_here) + 1e-6 && tuned_here < here,
          "%s: fine-tuned ./train eval %.7f, here %.7f, before %.7f: %s", label, tuned_cli, tuned_here, here, out);
    free(out);
    /* and sampled from */
    snprintf(args, sizeof args, "sample --checkpoint %s --device cpu --ids -G 5 --seed 3", exported);
    const int rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "ids"), "%s: ./train sample (%d): %s", label, rc, out);
    free(out);
    free(tok);
    free(mv);
    free(back);
    free(params);
    param_table_free(&t);
}

TEST(an_untied_llama_with_llama3_rope_scaling_in_bf16_shards_round_trips_through_eval_finetune_and_export) {
    round_trip(&LLAMA, "llama");
}

TEST(a_tied_qwen3_with_qk_norm_round_trips_through_eval_finetune_and_export) {
    round_trip(&QWEN3, "qwen3");
}

TEST(a_qwen2_with_qkv_bias_round_trips_through_eval_finetune_and_export) {
    round_trip(&QWEN2, "qwen2");
}

TEST(a_gemma3_with_sliding_and_global_layers_in_bf16_round_trips_through_eval_finetune_and_export) {
    round_trip(&GEMMA3, "gemma3");
}

TEST(a_gemma3_config_with_transformers_5s_rope_parameters_in_f32_shards_round_trips_too) {
    round_trip(&GEMMA3_V5, "gemma3-v5");
}

/* A tiny checkpoint of m in dir (F32 or BF16 as m says), its tensors left in ts for changes. */
static int checkpoint_in(const char *dir, const TinyModel *m, TestTensor *ts, ParamTable *t, float **params) {
    char cmd[900], err[ERR_LEN];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    if (system(cmd) != 0) return -1;
    const GPTConfig cfg = config_of(m);
    if (param_table_build(t, &cfg, err) != 0) return -1;
    *params = tiny_weights(t, m, 3);
    const int n = hf_tensors(t, m, *params, ts);
    write_checkpoint(dir, m, ts, n);
    return n;
}

static int index_of(const TestTensor *ts, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(ts[i].name, name) == 0) return i;
    return -1;
}

TEST(a_family_config_the_trainer_does_not_compute_is_refused_naming_the_field) {
    const struct {
        const char *extra, *msg;
    } cases[] = {
        {", \"attention_bias\": true", "attention_bias is true"},
        {", \"mlp_bias\": true", "mlp_bias is true"},
        {", \"hidden_act\": \"gelu\"", "hidden_act gelu is not computed here"},
        {", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", "rope_scaling rope_type yarn is not computed here"},
        {", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", "rope_scaling.low_freq_factor is missing"},
        {", \"model_type\": \"mistral\"", "model_type mistral is not supported"},
        {", \"num_key_value_heads\": 3", "4 heads do not split into groups of 3 kv heads"},
        {", \"head_dim\": \"6\"", "\"head_dim\" is a string, expected an integer or null"},
        {", \"attention_dropout\": 1.5", "attention_dropout is 1.5, not a probability from 0 to 1"},
        /* numbers past a double's or a float's range would train as inf or as 0 (the default put in,
         * or the cap dropped) and write back a config.json that holds no JSON */
        {", \"rope_theta\": 1e400", "the number 1e400 is too large for a double"},
        /* and below a float's, every angle NaN */
        {", \"rope_theta\": 1e-50", "rope_theta is not a positive number that a float holds"},
        {", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 1e-40}",
         "rope_scaling.factor is missing or not a positive number that a float holds"},
        {", \"rms_norm_eps\": 1e300", "rms_norm_eps is not a positive number that a float holds"},
        {", \"rms_norm_eps\": 1e-320", "rms_norm_eps is not a positive number that a float holds"},
        {", \"final_logit_softcapping\": 1e-320", "final_logit_softcapping is not a positive number"},
        /* beside rope_scaling, transformers 5 would take rope_scaling and 4 rope_parameters */
        {", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}",
         "sets both rope_parameters and rope_scaling"},
        {", \"pad_token_id\": 300", "pad token 300 is not one of the 300 tokens"},
    };
    char err[ERR_LEN];
    GPTConfig cfg;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(test_tmpdir(), &LLAMA, cases[i].extra);
        CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, cases[i].msg) && !strchr(err, '\n'),
              "'%s': message '%s' lacks '%s'", cases[i].extra, err, cases[i].msg);
    }
    /* Qwen's layers from max_window_layers on slide when use_sliding_window is true and there is a
     * window (transformers' rule without layer_types); LlamaConfig has no such field */
    const struct {
        const TinyModel *m;
        const char *extra;
        int accepted;
    } windows[] = {
        {&QWEN3, ", \"use_sliding_window\": true, \"max_window_layers\": 1", 0},
        {&QWEN2, ", \"use_sliding_window\": true, \"max_window_layers\": 0, \"sliding_window\": 16", 0},
        {&QWEN3, ", \"use_sliding_window\": true", 1}, /* the default 28 layers of full attention */
        {&QWEN3, ", \"use_sliding_window\": true, \"max_window_layers\": 2", 1},
        {&QWEN3, ", \"use_sliding_window\": true, \"max_window_layers\": 1, \"sliding_window\": null", 1},
        {&QWEN2, ", \"use_sliding_window\": true, \"max_window_layers\": 0, "
                 "\"layer_types\": [\"full_attention\", \"full_attention\"]", 1},
        {&QWEN3, ", \"use_sliding_window\": false, \"layer_types\": [\"full_attention\", \"sliding_attention\"]", 0},
        {&LLAMA, ", \"use_sliding_window\": true, \"max_window_layers\": 0", 1},
        /* dropout is a training setting, noted by training, not a part of the model; LlamaConfig reads
         * no GPT-2 field */
        {&LLAMA, ", \"attention_dropout\": 0.1", 1},
        {&LLAMA, ", \"resid_pdrop\": 1.5", 1},
    };
    for (size_t i = 0; i < sizeof windows / sizeof windows[0]; i++) {
        write_config(test_tmpdir(), windows[i].m, windows[i].extra);
        const int rc = hf_read_config(test_tmpdir(), &cfg, err);
        CHECK(windows[i].accepted ? rc == 0
                                  : rc != 0 && (strstr(err, "layers 0 to 1 would see a sliding window") ||
                                                strstr(err, "layers 1 to 1 would see a sliding window") ||
                                                strstr(err, "layer_types[1] is not \"full_attention\"")),
              "'%s': %d %s", windows[i].extra, rc, err);
    }
    /* a base inside rope_parameters and outside it: transformers 4 reads the outer, 5 the inner */
    write_config(test_tmpdir(), &QWEN3, ", \"rope_theta\": 10000.0");
    CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 &&
              strstr(err, "rope_theta and rope_parameters.rope_theta are both set and differ"),
          "two bases: %s", err);
    write_config(test_tmpdir(), &QWEN3, ", \"rope_theta\": 1000000.0, \"pad_token_id\": 7");
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.rope.theta == 1e6 && cfg.has_pad_token && cfg.pad_token_id == 7, "theta %g, pad %d %d", cfg.rope.theta,
          cfg.has_pad_token, cfg.pad_token_id);
    /* nn.Embedding counts a negative padding_idx from the end (converted LLaMA configs carry -1) */
    write_config(test_tmpdir(), &QWEN3, ", \"pad_token_id\": -1");
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.has_pad_token && cfg.pad_token_id == QWEN3.V - 1, "pad -1: %d %d", cfg.has_pad_token, cfg.pad_token_id);
    write_config(test_tmpdir(), &QWEN3, ", \"pad_token_id\": -301");
    CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, "pad_token_id is not a token id"), "pad -301: %s",
          err);
    /* left out, a field takes its config class's default: Qwen3's head_dim is 128, Llama's is C / NH */
    TinyModel no_head_dim = QWEN3;
    no_head_dim.hd = 0;
    write_config(test_tmpdir(), &no_head_dim, ", \"num_key_value_heads\": null");
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.head_dim == 128 && cfg.num_kv_heads == QWEN3.NH && !cfg.has_pad_token, "qwen3 defaults: hd %d NKV %d pad %d",
          cfg.head_dim, cfg.num_kv_heads, cfg.has_pad_token);
    /* a null head_dim is not Qwen's default: its attention would take None */
    write_config(test_tmpdir(), &no_head_dim, ", \"head_dim\": null");
    CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, "\"head_dim\" is null"), "qwen3 head_dim null: %s",
          err);
    TinyModel wider = LLAMA;
    wider.C = 24;
    write_config(test_tmpdir(), &wider, ", \"head_dim\": null, \"tie_word_embeddings\": true");
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.head_dim == 24 / LLAMA.NH && !cfg.untied_head, "llama defaults: hd %d untied %d", cfg.head_dim,
          cfg.untied_head);
}

TEST(a_missing_extra_or_misshaped_tensor_is_refused_naming_it_and_both_shapes) {
    char dir[800], path[900], err[ERR_LEN];
    TestTensor ts[128];
    ParamTable t;
    float *params, *back;
    TinyModel m = QWEN3; /* tied, one F32 file */
    snprintf(dir, sizeof dir, "%s/q", test_tmpdir());
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    const int n = checkpoint_in(dir, &m, ts, &t, &params);
    REQUIRE(n > 0, "checkpoint");
    back = malloc(t.total * sizeof *back);
    const int k = index_of(ts, n, "model.layers.1.self_attn.k_norm.weight");
    TestTensor kept = ts[k];
    ts[k] = ts[n - 1];
    write_test_safetensors(path, ts, n - 1);
    CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, "has no tensor model.layers.1.self_attn.k_norm.weight"),
          "missing: %s", err);
    ts[k] = kept;
    ts[n] = ts[index_of(ts, n, "model.norm.weight")];
    snprintf(ts[n].name, sizeof ts[n].name, "model.layers.0.self_attn.o_proj.bias");
    write_test_safetensors(path, ts, n + 1);
    CHECK(hf_read_weights(dir, &t, back, err) != 0 &&
              strstr(err, "has a tensor model.layers.0.self_attn.o_proj.bias that Qwen3ForCausalLM does not"),
          "extra: %s", err);
    const int v = index_of(ts, n, "model.layers.0.self_attn.v_proj.weight");
    ts[v].d0 -= 1, ts[v].bytes -= ts[v].d1 * 4;
    write_test_safetensors(path, ts, n);
    CHECK(hf_read_weights(dir, &t, back, err) != 0 &&
              strstr(err, "tensor model.layers.0.self_attn.v_proj.weight is [15, 24] but the model (config.json) needs [16, 24]"),
          "misshaped: %s", err);
    ts[v].d0 += 1, ts[v].bytes += ts[v].d1 * 4;
    /* a weight that is not a number (a damaged file, or a model saved after it diverged) */
    const int o = index_of(ts, n, "model.layers.1.mlp.down_proj.weight");
    float *w = (float *)ts[o].data;
    const float kept_w = w[5];
    const float bad[2] = {NAN, INFINITY};
    const char *said[2] = {"tensor model.layers.1.mlp.down_proj.weight holds a NaN at element 5",
                           "tensor model.layers.1.mlp.down_proj.weight holds an infinity at element 5"};
    for (int b = 0; b < 2; b++) {
        w[5] = bad[b];
        write_test_safetensors(path, ts, n);
        CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, said[b]) && !strchr(err, '\n'),
              "a weight that is not a number: %s", err);
    }
    w[5] = kept_w;
    /* a tied model's lm_head.weight: the embedding itself is accepted, another matrix is not */
    ts[n] = ts[index_of(ts, n, "model.embed_tokens.weight")];
    snprintf(ts[n].name, sizeof ts[n].name, "lm_head.weight");
    write_test_safetensors(path, ts, n + 1);
    CHECK(hf_read_weights(dir, &t, back, err) == 0 && memcmp(back, params, t.total * sizeof *back) == 0,
          "a tied lm_head equal to the embedding: %s", err);
    ts[n].data = malloc(ts[n].bytes);
    memcpy(ts[n].data, ts[index_of(ts, n, "model.embed_tokens.weight")].data, ts[n].bytes);
    ((float *)ts[n].data)[7] += 1.0f;
    write_test_safetensors(path, ts, n + 1);
    CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, "lm_head.weight is not the token embedding"),
          "a tied lm_head of its own: %s", err);
    free(ts[n].data);
    free_tensors(ts, n);
    free(params);
    param_table_free(&t);
    /* an untied model without its head, and shards that do not match their index */
    m = QWEN2;
    snprintf(dir, sizeof dir, "%s/q2", test_tmpdir());
    const int n2 = checkpoint_in(dir, &m, ts, &t, &params);
    REQUIRE(n2 > 0, "checkpoint");
    snprintf(path, sizeof path, "%s/model-00002-of-00002.safetensors", dir);
    write_test_safetensors(path, ts + n2 / 2, n2 - n2 / 2 - 1); /* the last, lm_head.weight, left out */
    CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, "puts tensor lm_head.weight in") &&
              strstr(err, "does not hold it"),
          "a shard short of the index: %s", err);
    /* the index listing a tensor twice (JSON keeps both keys) */
    write_test_safetensors(path, ts + n2 / 2, n2 - n2 / 2);
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    char *index = read_text(path);
    REQUIRE(index && strstr(index, "\"weight_map\": {"), "index: %s", index ? index : "");
    char *at = strstr(index, "\"weight_map\": {") + strlen("\"weight_map\": {");
    const struct {
        const char *entry, *msg;
    } entries[] = {
        {"\"lm_head.weight\": \"model-00002-of-00002.safetensors\"", "lists tensor lm_head.weight twice"},
        /* a NUL inside a name or a file: not the name the text before it gives */
        {"\"lm_head.weight\\u0000x\": \"model-00002-of-00002.safetensors\"",
         "the weight_map's tensor name \"lm_head.weight\" goes on past a NUL character"},
        {"\"lm_head.weight\\u0000x\": \"model-00002-of-00002.safetensors\\u0000x\"",
         "the weight_map's tensor name \"lm_head.weight\" goes on past a NUL character"},
        {"\"extra.weight\": \"model-00002-of-00002.safetensors\\u0000x\"",
         "weight_map gives tensor extra.weight no file name of this directory"},
    };
    for (size_t e = 0; e < sizeof entries / sizeof entries[0]; e++) {
        FILE *dup = fopen(path, "w");
        REQUIRE(dup, "rewriting %s", path);
        fprintf(dup, "%.*s%s, %s", (int)(at - index), index, entries[e].entry, at);
        fclose(dup);
        CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, entries[e].msg), "an index with %s: %s",
              entries[e].entry, err);
    }
    free(index);
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"weight_map\": {\"lm_head.weight\": \"gone.safetensors\"}}");
    fclose(f);
    CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, "gone.safetensors"), "a missing shard: %s", err);
    m.shards = 1;
    write_checkpoint(dir, &m, ts, n2 - 1);
    CHECK(hf_read_weights(dir, &t, back, err) != 0 && strstr(err, "has no tensor lm_head.weight"),
          "an untied model without lm_head: %s", err);
    free_tensors(ts, n2);
    free(back);
    free(params);
    param_table_free(&t);
}

TEST(init_from_flags_left_out_take_the_checkpoints_values_and_a_given_one_must_agree) {
    char dir[800], shard[800], args[2400];
    TestTensor ts[128];
    ParamTable t;
    float *params;
    snprintf(dir, sizeof dir, "%s/q2", test_tmpdir());
    snprintf(shard, sizeof shard, "%s/d.bin", test_tmpdir());
    const int n = checkpoint_in(dir, &QWEN2, ts, &t, &params);
    REQUIRE(n > 0, "checkpoint");
    free(write_tokens(shard, 400, (uint32_t)QWEN2.V));
    const struct {
        const char *flags, *msg;
    } cases[] = {
        {"--kv-heads 2", "has kv heads 1 but the flags give 2 (pass --kv-heads 1)"},
        {"--family llama", "is a qwen2 model but the flags give llama (pass --family qwen2"},
        {"-v 512", "has vocabulary 300 but the flags give 512 (pass -v 300)"},
        {"--max-seq-len 32", "has context (max_position_embeddings) 64 but the flags give 32"},
        {"-e qwen3-0.6b", "is a qwen2 model but the flags give qwen3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        snprintf(args, sizeof args, "--device cpu %s --init-from %s -i %s -b 2 -t 16 -x 1 -s 0 -o %s/r", cases[i].flags,
                 dir, shard, test_tmpdir());
        const int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strncmp(out, "error: ", 7) == 0 && strstr(out, cases[i].msg), "'%s': (%d) %s",
              cases[i].flags, rc, out);
        free(out);
    }
    free_tensors(ts, n);
    free(params);
    param_table_free(&t);
}

/* `model` (flags with -x 4 -n 2) trained straight to step 4 in DIR/a, and again in DIR/b resumed
 * from a's step-2 checkpoint: both step-4 checkpoints must be the same files. shard: its data. */
static void resume_ends_where_the_straight_run_does(const char *model, const char *d, char *shard, size_t n) {
    char args[2400], cmd[2400], a[900], b[900];
    snprintf(shard, n, "%s/d.bin", d);
    free(write_tokens(shard, 1200, 300));
    char *out = NULL;
    snprintf(args, sizeof args, "%s -i %s -o %s/a", model, shard, d);
    REQUIRE(run_train(args, &out) == 0, "straight run: %s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/b && cp -r %s/a/step_00000002 %s/b/ && echo step_00000002 > %s/b/latest", d,
             d, d, d);
    REQUIRE(system(cmd) == 0, "copying the step 2 checkpoint");
    snprintf(args, sizeof args, "%s -y 1 -i %s -o %s/b", model, shard, d);
    REQUIRE(run_train(args, &out) == 0, "resumed run: %s", out);
    CHECK(strstr(out, "resumed from"), "no resume line: %s", out);
    free(out);
    static const char *const files[] = {"state.bin", "model.safetensors", "config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/a/step_00000004/%s", d, files[i]);
        snprintf(b, sizeof b, "%s/b/step_00000004/%s", d, files[i]);
        CHECK(same_bytes(a, b), "%s differs between the straight and the resumed run", files[i]);
    }
}

TEST(a_llama_run_resumed_from_its_checkpoint_ends_bit_for_bit_where_the_uninterrupted_one_does) {
    const char *d = test_tmpdir();
    char shard[800], args[2400];
    const char *model = "--device cpu --family llama --layers 2 --heads 4 --kv-heads 2 --head-dim 6 --dim 20 "
                        "--ffn-dim 36 --max-seq-len 64 -v 300 -b 2 -t 16 -x 4 -n 2 --keep-checkpoints 3 -s 0 "
                        "--val-every 0 --warmup 1";
    resume_ends_where_the_straight_run_does(model, d, shard, sizeof shard);
    char *out = NULL;
    /* a resume with another number of kv heads is refused naming the flag */
    snprintf(args, sizeof args, "%s --kv-heads 1 -x 6 -y 1 -i %s -o %s/b", model, shard, d);
    int rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "/b/step_00000004 has kv heads 2 but the flags give 1 (pass --kv-heads 2)"),
          "(%d) %s", rc, out);
    free(out);
    /* the shape flags left out, the checkpoint's config.json gives the model: the resume goes on */
    snprintf(args, sizeof args, "--device cpu -b 2 -t 16 -x 5 -s 0 --val-every 0 --warmup 1 -y 1 -i %s -o %s/b", shard,
             d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "step     5/5"), "a resume without the shape flags: (%d) %s", rc, out);
    free(out);
    /* --init-from beside -y 1 is passed over whole: neither its shape nor its tokenizer is asked about */
    snprintf(args, sizeof args, "--device cpu -b 2 -t 16 -x 6 -s 0 --val-every 0 --warmup 1 -y 1 -i %s -o %s/b "
             "--init-from %s/nowhere --family gpt2", shard, d, d);
    rc = run_train(args, &out);
    CHECK(rc == 1 && out && strstr(out, "/b/step_00000005 is a llama model but the flags give gpt2 (pass --family llama"),
          "--family gpt2 on a llama resume: (%d) %s", rc, out);
    free(out);
    snprintf(args, sizeof args, "--device cpu -b 2 -t 16 -x 6 -s 0 --val-every 0 --warmup 1 -y 1 -i %s -o %s/b "
             "--init-from %s/nowhere", shard, d, d);
    rc = run_train(args, &out);
    CHECK(rc == 0 && out && strstr(out, "note: resuming: the checkpoint holds the weights, shape and tokenizer; "
                                        "--init-from ") && strstr(out, "step     6/6"),
          "a resume beside --init-from: (%d) %s", rc, out);
    free(out);
}

/* Rewrites the state file at path, a checkpoint of this version whose arrays take `arrays` bytes, as
 * an older version wrote it: `fields` bytes of this header under that version's number (the fields
 * of every version lead in the same order), its checksum, the arrays; then resealed. */
static void rewrite_state_as(const char *path, uint32_t version, size_t fields, size_t arrays) {
    char err[ERR_LEN];
    size_t len;
    char *now = read_file(path, &len);
    REQUIRE(now && len > arrays + fields + 8, "state file %s of %zu bytes", path, len);
    FILE *f = fopen(path, "wb");
    REQUIRE(f, "cannot rewrite %s", path);
    const uint64_t unsealed = 0;
    fwrite(now, 1, 8, f);
    fwrite(&version, 4, 1, f);
    fwrite(now + 12, 1, fields - 12, f);
    fwrite(&unsealed, 8, 1, f);
    fwrite(now + len - arrays, 1, arrays, f);
    fclose(f);
    free(now);
    REQUIRE(checkpoint_state_reseal(path, err) == 0, "%s", err);
}

/* Version 4's header (the last before the family block): 152 bytes of fields, then the checksum. */
#define STATE_V4_FIELDS 152

TEST(a_version_4_state_file_of_a_gpt2_run_still_loads) {
    GPTConfig cfg = {.num_layers = 2, .num_heads = 2, .dim = 16, .max_seq_len = 32, .vocab_size = 300};
    gpt_config_finish(&cfg);
    ParamTable t;
    char err[ERR_LEN], path[900];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    float *p = malloc(3 * t.total * sizeof *p), *q = malloc(3 * t.total * sizeof *q);
    Rng r;
    rng_seed(&r, 9);
    fill_normal(p, 3 * t.total, 1.0f, &r);
    TrainState st = {.step = 7, .B = 2, .T = 16};
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p + t.total, p + 2 * t.total, &st, 1, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000007/state.bin", test_tmpdir());
    /* the same run as version 4 wrote it: no family block */
    rewrite_state_as(path, 4, STATE_V4_FIELDS, 3 * t.total * sizeof(float));
    TrainState back;
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &back, err) == 0, "%s", err);
    CHECK(back.step == 7 && back.B == 2 && memcmp(p, q, 3 * t.total * sizeof *p) == 0,
          "the version 4 file loaded as step %d with other arrays", back.step);
    /* and it is a GPT-2: a Llama of the same shape is refused naming the family */
    GPTConfig llama = cfg;
    gpt_family_defaults(&llama, FAMILY_LLAMA);
    llama.num_kv_heads = llama.head_dim = llama.ffn_dim = 0;
    gpt_config_finish(&llama);
    ParamTable lt;
    REQUIRE(param_table_build(&lt, &llama, err) == 0, "%s", err);
    float *x = malloc(3 * lt.total * sizeof *x);
    CHECK(checkpoint_load_latest(test_tmpdir(), &lt, x, x + lt.total, x + 2 * lt.total, &back, err) != 0 &&
              strstr(err, "is a gpt2 model but this run's is llama (pass --family gpt2"),
          "a llama run on a gpt2 checkpoint: %s", err);
    free(x);
    param_table_free(&lt);
    /* its shape makes the family block before the checksum is read: a damaged one (dim -2^30) is corrupt */
    FILE *f = fopen(path, "r+b");
    const int32_t damaged = INT32_MIN / 2;
    REQUIRE(f && fseek(f, 24, SEEK_SET) == 0 && fwrite(&damaged, sizeof damaged, 1, f) == 1 && fclose(f) == 0,
            "damaging %s", path);
    CHECK(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &back, err) != 0 &&
              strstr(err, "is not a fusedgpt state file (corrupt)"),
          "a damaged version 4 header: %s", err);
    free(q);
    free(p);
    param_table_free(&t);
}

/* Version 5's family block (before Gemma's fields and the logit cap): 88 bytes after the fields. */
#define STATE_V5_FAMILY 88

TEST(a_version_5_state_file_of_a_llama_run_with_a_logit_cap_still_loads) {
    GPTConfig cfg = config_of(&LLAMA);
    cfg.logit_softcap = 15.0f; /* version 5 did not record it: the run's holds */
    ParamTable t;
    char err[ERR_LEN], path[900];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    float *p = malloc(3 * t.total * sizeof *p), *q = malloc(3 * t.total * sizeof *q);
    Rng r;
    rng_seed(&r, 4);
    fill_normal(p, 3 * t.total, 1.0f, &r);
    TrainState st = {.step = 6, .B = 2, .T = 16};
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p + t.total, p + 2 * t.total, &st, 1, err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/step_00000006/state.bin", test_tmpdir());
    rewrite_state_as(path, 5, STATE_V4_FIELDS + STATE_V5_FAMILY, 3 * t.total * sizeof(float));
    TrainState back;
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, &back, err) == 0, "%s", err);
    CHECK(back.step == 6 && memcmp(p, q, 3 * t.total * sizeof *p) == 0,
          "the version 5 file loaded as step %d with other arrays", back.step);
    /* its family block still decides: a Llama of another RoPE is refused */
    GPTConfig other = cfg;
    other.rope.factor = 4.0;
    ParamTable ot;
    REQUIRE(param_table_build(&ot, &other, err) == 0, "%s", err);
    CHECK(checkpoint_load_latest(test_tmpdir(), &ot, q, q + ot.total, q + 2 * ot.total, &back, err) != 0 &&
              strstr(err, "other norm, RoPE"),
          "a llama of another rope on a version 5 file: %s", err);
    param_table_free(&ot);
    free(q);
    free(p);
    param_table_free(&t);
}

/* Version 9's header: version 10's without the mask of bf16 arrays (8 bytes before the checksum);
 * version 8's: version 9's without the schedule's shape (8 bytes before that); version 7's: version
 * 8's without the validation shard (16 bytes before that); version 6's: version 7's without its
 * settings block (24 bytes before that). */
#define STATE_V10_BF16_ARRAYS 8
#define STATE_V9_SCHEDULE (STATE_V10_BF16_ARRAYS + 8)
#define STATE_V8_VALIDATION 16
#define STATE_V7_SETTINGS 24

/* A checkpoint of m saved with st (whose settings and validation shard are recorded), rewritten as
 * `version` (its header `cut` bytes shorter before the checksum), then loaded into *back; the
 * arrays must come back as saved. */
static void load_as_older_version(const TinyModel *m, TrainState st, uint32_t version, size_t cut, TrainState *back) {
    GPTConfig cfg = config_of(m);
    ParamTable t;
    char err[ERR_LEN], path[900];
    REQUIRE(param_table_build(&t, &cfg, err) == 0, "%s", err);
    float *p = malloc(3 * t.total * sizeof *p), *q = malloc(3 * t.total * sizeof *q);
    Rng r;
    rng_seed(&r, version);
    fill_normal(p, 3 * t.total, 1.0f, &r);
    REQUIRE(checkpoint_save(test_tmpdir(), &t, p, p + t.total, p + 2 * t.total, &st, 1, err) == 0, "%s", err);
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, back, err) == 0, "%s", err);
    CHECK(back->val_tokens == st.val_tokens && back->val_fingerprint == st.val_fingerprint &&
              back->settings.recorded && !memcmp(&back->schedule, &st.schedule, sizeof st.schedule),
          "this version keeps the validation shard, settings and schedule: %llu %llu %d, shape %d decay %d",
          (unsigned long long)back->val_tokens, (unsigned long long)back->val_fingerprint, back->settings.recorded,
          (int)back->schedule.shape, back->schedule.decay_steps);
    snprintf(path, sizeof path, "%s/step_%08d/state.bin", test_tmpdir(), st.step);
    const size_t arrays = 3 * t.total * sizeof(float);
    struct stat sb;
    REQUIRE(stat(path, &sb) == 0, "no %s", path);
    rewrite_state_as(path, version, (size_t)sb.st_size - arrays - 8 - cut, arrays);
    memset(back, 0xff, sizeof *back);
    REQUIRE(checkpoint_load_latest(test_tmpdir(), &t, q, q + t.total, q + 2 * t.total, back, err) == 0, "%s", err);
    CHECK(back->step == st.step && back->B == st.B && memcmp(p, q, 3 * t.total * sizeof *p) == 0,
          "the version %u file loaded as step %d with other arrays", version, back->step);
    free(q);
    free(p);
    param_table_free(&t);
}

static const TrainState RECORDED = {
    .step = 5, .B = 2, .T = 16, .val_tokens = 4000, .val_fingerprint = 77,
    .settings = {.recorded = 1, .weight_decay = 0.1f, .grad_clip = 1},
    .schedule = {.shape = LR_WSD, .total_steps = 50, .warmup = 4, .decay_steps = 9, .lr = 1e-3f, .lr_final = 1e-4f}};

TEST(a_version_9_state_file_loads_with_every_array_fp32) {
    TrainState back;
    load_as_older_version(&QWEN3, RECORDED, 9, STATE_V10_BF16_ARRAYS, &back);
    CHECK(back.schedule.shape == LR_WSD && back.schedule.decay_steps == 9 && back.val_tokens == 4000 &&
              back.settings.recorded,
          "the version 9 file: shape %d, decay %d, validation %llu", (int)back.schedule.shape,
          back.schedule.decay_steps, (unsigned long long)back.val_tokens);
}

TEST(a_version_8_state_file_loads_with_a_cosine_schedule) {
    TrainState back;
    load_as_older_version(&QWEN3, RECORDED, 8, STATE_V9_SCHEDULE, &back);
    CHECK(back.schedule.shape == LR_COSINE && back.schedule.decay_steps == 0 && back.schedule.total_steps == 50 &&
              back.schedule.warmup == 4 && back.schedule.lr == 1e-3f && back.schedule.lr_final == 1e-4f &&
              back.val_tokens == 4000 && back.settings.recorded,
          "the version 8 file: shape %d, decay %d, -x %d, warmup %d, validation %llu", (int)back.schedule.shape,
          back.schedule.decay_steps, back.schedule.total_steps, back.schedule.warmup,
          (unsigned long long)back.val_tokens);
}

TEST(a_version_7_state_file_loads_with_its_validation_shard_unrecorded) {
    TrainState back;
    load_as_older_version(&QWEN3, RECORDED, 7, STATE_V9_SCHEDULE + STATE_V8_VALIDATION, &back);
    CHECK(back.settings.recorded && back.settings.weight_decay == 0.1f && back.val_tokens == 0 &&
              back.val_fingerprint == 0,
          "the version 7 file: settings %d %g, validation %llu %llu", back.settings.recorded,
          back.settings.weight_decay, (unsigned long long)back.val_tokens, (unsigned long long)back.val_fingerprint);
}

TEST(a_version_6_state_file_loads_with_its_settings_unrecorded) {
    TrainState back;
    load_as_older_version(&LLAMA, RECORDED, 6, STATE_V9_SCHEDULE + STATE_V8_VALIDATION + STATE_V7_SETTINGS, &back);
    CHECK(!back.settings.recorded && back.settings.weight_decay == 0 && back.settings.grad_clip == 0 &&
              back.val_tokens == 0,
          "a version 6 file's settings: recorded %d, wd %g, clip %g", back.settings.recorded,
          back.settings.weight_decay, back.settings.grad_clip);
}

TEST(a_released_models_preset_carries_its_vocabulary_and_a_given_v_overrides_it) {
    char shard[800], args[2400], *out = NULL;
    snprintf(shard, sizeof shard, "%s/d.bin", test_tmpdir());
    free(write_tokens(shard, 200, 300));
    /* the preset's family and vocabulary, a shape small enough for one CPU step */
    const char *small = "--device cpu --layers 1 --dim 32 --heads 2 --kv-heads 1 --head-dim 16 --ffn-dim 32 "
                        "--max-seq-len 16 -b 1 -t 8 -x 1 -s 0 --val-every 0";
    snprintf(args, sizeof args, "-e qwen3-0.6b %s -i %s -o %s/a", small, shard, test_tmpdir());
    CHECK(run_train(args, &out) == 0 && strstr(out, "V=151936"), "qwen3-0.6b without -v: %s", out);
    free(out);
    snprintf(args, sizeof args, "-e llama3.2-1b %s -v 300 -i %s -o %s/b", small, shard, test_tmpdir());
    CHECK(run_train(args, &out) == 0 && strstr(out, "V=300 "), "llama3.2-1b with -v 300: %s", out);
    free(out);
}

TEST(config_json_is_written_with_the_fields_transformers_writes_for_each_family) {
    const struct {
        const TinyModel *m;
        const char *has[8], *lacks;
    } cases[] = {
        {&LLAMA,
         {"\"architectures\": [\"LlamaForCausalLM\"]", "\"head_dim\": 6,", "\"rms_norm_eps\": 1e-05,",
          "\"rope_theta\": 500000.0,", "\"factor\": 8.0,", "\"original_max_position_embeddings\": 16,",
          "\"rope_type\": \"llama3\"", "\"tie_word_embeddings\": false,"},
         "\"use_sliding_window\""},
        {&QWEN3,
         {"\"architectures\": [\"Qwen3ForCausalLM\"]", "\"model_type\": \"qwen3\"", "\"head_dim\": 8,",
          "\"rms_norm_eps\": 1e-06,", "\"rope_scaling\": null,", "\"rope_theta\": 1000000.0,",
          "\"tie_word_embeddings\": true,", "\"attention_bias\": false,"},
         "\"mlp_bias\""},
        {&QWEN2,
         {"\"architectures\": [\"Qwen2ForCausalLM\"]", "\"num_key_value_heads\": 1,", "\"vocab_size\": 300\n",
          "\"use_sliding_window\": false,", "\"max_position_embeddings\": 64,", "\"hidden_size\": 16,",
          "\"intermediate_size\": 24,", "\"num_hidden_layers\": 2,"},
         "\"head_dim\""},
    };
    char buf[4096];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const GPTConfig cfg = config_of(cases[i].m);
        REQUIRE(hf_config_json(&cfg, -1, -1, buf, sizeof buf) > 0, "%s: no config.json", gpt_family_name(cfg.family));
        for (int k = 0; k < 8; k++)
            CHECK(strstr(buf, cases[i].has[k]), "%s: config.json lacks %s:\n%s", gpt_family_name(cfg.family),
                  cases[i].has[k], buf);
        /* no tokenizer: null, not the class's default (GPT-2's 50256, outside a small vocabulary) */
        CHECK(!strstr(buf, cases[i].lacks) && strstr(buf, "\"bos_token_id\": null,\n  \"eos_token_id\": null,"),
              "%s: config.json has %s, or token ids that are not null:\n%s", gpt_family_name(cfg.family),
              cases[i].lacks, buf);
        CHECK(hf_config_json(&cfg, 5, 7, buf, sizeof buf) > 0 && strstr(buf, "\"bos_token_id\": 5,\n  \"eos_token_id\": 7,"),
              "%s: the tokenizer's opening token and separator are not bos and eos:\n%s", gpt_family_name(cfg.family),
              buf);
        /* transformers' config classes take final_logit_softcapping as a float only */
        GPTConfig capped = cfg;
        capped.logit_softcap = 30.0f;
        CHECK(hf_config_json(&capped, 5, 7, buf, sizeof buf) > 0 && strstr(buf, "\"final_logit_softcapping\": 30.0,"),
              "%s: the cap is not written as a float:\n%s", gpt_family_name(cfg.family), buf);
        CHECK(hf_config_json(&cfg, -1, -1, buf, 100) == -1, "%s: a buffer too small is not refused",
              gpt_family_name(cfg.family));
        CHECK(!strstr(buf, "pad_token_id"), "%s: a pad token where the model has none", gpt_family_name(cfg.family));
    }
    /* a pad token read from config.json is written back, where LlamaConfig sorts it */
    GPTConfig padded = config_of(&LLAMA);
    padded.has_pad_token = 1;
    padded.pad_token_id = 7;
    REQUIRE(hf_config_json(&padded, -1, -1, buf, sizeof buf) > 0, "no config.json");
    CHECK(strstr(buf, "\"num_key_value_heads\": 2,\n  \"pad_token_id\": 7,\n  \"pretraining_tp\""),
          "llama's pad token:\n%s", buf);
}

/* A multimodal checkpoint in dir: the text model of m under body (its tensor names' prefix before
 * "layers."), beside a vision tower and projector under vision; params its weights. */
static void write_multimodal(const char *dir, const TinyModel *m, const char *body, const char *vision,
                             const ParamTable *t, float *params) {
    char cmd[900], name[160];
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    REQUIRE(system(cmd) == 0, "mkdir");
    write_gemma3_config(dir, m, "", 1);
    TestTensor ts[128];
    int n = hf_tensors_under(t, m, params, ts, body);
    const float patch[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    snprintf(name, sizeof name, "%svision_tower.vision_model.embeddings.patch_embedding.weight", vision);
    add_tensor(ts, &n, m, name, 3, 4, patch);
    snprintf(name, sizeof name, "%smulti_modal_projector.mm_input_projection_weight", vision);
    add_tensor(ts, &n, m, name, 4, 3, patch);
    snprintf(cmd, sizeof cmd, "%s/model.safetensors", dir);
    write_test_safetensors(cmd, ts, n);
    free_tensors(ts, n);
}

TEST(a_multimodal_gemma3_checkpoints_text_model_is_read_under_either_prefix_and_its_vision_tower_passed_over) {
    char dir[800], shard[800], err[ERR_LEN], msg[1024];
    const GPTConfig want = config_of(&GEMMA3);
    ParamTable t;
    REQUIRE(param_table_build(&t, &want, err) == 0, "%s", err);
    float *params = tiny_weights(&t, &GEMMA3, 21), *back = malloc(t.total * sizeof *back);
    snprintf(shard, sizeof shard, "%s/mm.bin", test_tmpdir());
    uint32_t *tok = write_tokens(shard, 300, (uint32_t)GEMMA3.V);
    /* transformers 4 saves language_model.model.*, transformers 5 model.language_model.* */
    const char *const layouts[2][2] = {{"language_model.model.", ""}, {"model.language_model.", "model."}};
    for (int k = 0; k < 2; k++) {
        snprintf(dir, sizeof dir, "%s/mm%d", test_tmpdir(), k);
        write_multimodal(dir, &GEMMA3, layouts[k][0], layouts[k][1], &t, params);
        GPTConfig got;
        REQUIRE(hf_read_config(dir, &got, err) == 0, "%s: %s", layouts[k][0], err);
        CHECK(same_config(&got, &want, msg, sizeof msg), "%s: text_config read as (got/want) %s", layouts[k][0], msg);
        memset(back, 0xff, t.total * sizeof *back);
        REQUIRE(hf_read_weights(dir, &t, back, err) == 0, "%s: %s", layouts[k][0], err);
        CHECK(memcmp(back, params, t.total * sizeof *back) == 0, "%s: the text weights read differ from those written",
              layouts[k][0]);
    }
    char *out = NULL;
    const double here = eval_here(&t, params, tok, 300, 16), cli = eval_cli(dir, shard, &out);
    CHECK(isfinite(here) && fabs(cli - here) <= 1e-6 * fabs(here) + 1e-6, "multimodal ./train eval %.7f, here %.7f: %s",
          cli, here, out);
    free(out);
    /* a text_config's tie that the outer config contradicts, and a gemma3 without a text_config */
    GPTConfig other;
    write_gemma3_config(dir, &GEMMA3, "", 1);
    snprintf(msg, sizeof msg, "%s/config.json", dir);
    FILE *f = fopen(msg, "r+");
    fseek(f, -1, SEEK_END);
    fprintf(f, ", \"tie_word_embeddings\": false}");
    fclose(f);
    CHECK(hf_read_config(dir, &other, err) != 0 && strstr(err, "tie_word_embeddings and text_config.tie_word_embeddings disagree"),
          "ties that disagree: %s", err);
    f = fopen(msg, "w");
    fprintf(f, "{\"model_type\": \"gemma3\", \"vision_config\": {}}");
    fclose(f);
    CHECK(hf_read_config(dir, &other, err) != 0 && strstr(err, "has no text_config object"), "no text_config: %s", err);
    free(tok);
    free(back);
    free(params);
    param_table_free(&t);
}

TEST(a_gemma3_config_the_trainer_does_not_compute_is_refused_naming_the_field) {
    const struct {
        const char *extra, *msg;
    } cases[] = {
        {", \"hidden_activation\": \"gelu\"", "hidden_activation gelu is not computed here"},
        {", \"attn_logit_softcapping\": 50.0", "attn_logit_softcapping is set"},
        {", \"attention_bias\": true", "attention_bias is true"},
        {", \"use_bidirectional_attention\": true", "use_bidirectional_attention is true"},
        {", \"layer_types\": [\"sliding_attention\", \"full_attention\"]", "layer_types has 2 entries but num_hidden_layers is 3"},
        {", \"layer_types\": [\"sliding_attention\", \"chunked_attention\", \"full_attention\"]", "layer_types[1] is not"},
        {", \"sliding_window\": null", "sliding_window is null but layers slide"},
        {", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}", "rope_scaling rope_type yarn is not computed here"},
        /* beside rope_scaling, transformers 5 would take rope_scaling and 4 rope_parameters */
        {", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0}",
         "sets both rope_parameters and rope_scaling"},
        {", \"head_dim\": null", "\"head_dim\" is null"},
        {", \"num_key_value_heads\": null", "\"num_key_value_heads\" is null"},
        {", \"query_pre_attn_scalar\": 16.5", "\"query_pre_attn_scalar\" is 16.5 written with a fraction"},
        {", \"query_pre_attn_scalar\": 0", "query_pre_attn_scalar is not a positive number"},
        {", \"pad_token_id\": 300", "pad token 300 is not one of the 300 tokens"},
        {", \"layer_types\": \"sliding_attention\"", "\"layer_types\" is a string, expected an array or null"},
        {", \"attention_dropout\": 1.5", "attention_dropout is 1.5, not a probability from 0 to 1"},
        /* a typo would round the embedding scale as float32, unlike transformers */
        {", \"torch_dtype\": \"bfloat\"", "torch_dtype bfloat is not float32, bfloat16 or float16"},
        {", \"dtype\": \"float64\"", "dtype float64 is not float32, bfloat16 or float16"},
    };
    char err[ERR_LEN];
    GPTConfig cfg;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_config(test_tmpdir(), &GEMMA3, cases[i].extra);
        CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, cases[i].msg) && !strchr(err, '\n'),
              "'%s': message '%s' lacks '%s'", cases[i].extra, err, cases[i].msg);
    }
    /* rope_parameters alone (no rope_scaling beside it) */
    TinyModel unscaled = GEMMA3;
    unscaled.rope_json = "\"rope_local_base_freq\": 20000.0, \"rope_theta\": 1000000.0";
    const struct {
        const char *extra, *msg;
    } v5_cases[] = {
        {", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"}, \"sliding_attention\": "
         "{\"rope_type\": \"linear\", \"factor\": 2.0}}", "rope_parameters.sliding_attention is scaled"},
        {", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0}", "rope_parameters has no full_attention"},
        {", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\", \"rope_theta\": 5e5}, "
         "\"sliding_attention\": {\"rope_type\": \"default\"}}",
         "rope_theta and rope_parameters.full_attention.rope_theta are both set and differ"},
        {", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\"}, \"sliding_attention\": "
         "{\"rope_type\": \"default\", \"rope_theta\": 1e4}}",
         "rope_local_base_freq and rope_parameters.sliding_attention.rope_theta are both set and differ"},
    };
    for (size_t i = 0; i < sizeof v5_cases / sizeof v5_cases[0]; i++) {
        write_config(test_tmpdir(), &unscaled, v5_cases[i].extra);
        CHECK(hf_read_config(test_tmpdir(), &cfg, err) != 0 && strstr(err, v5_cases[i].msg) && !strchr(err, '\n'),
              "'%s': message '%s' lacks '%s'", v5_cases[i].extra, err, v5_cases[i].msg);
    }
    /* the same bases said twice are one RoPE to either transformers */
    write_config(test_tmpdir(), &unscaled, ", \"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\", "
                                           "\"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\"}}");
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.rope.theta == 1e6 && cfg.rope_local_theta == 2e4, "theta %g, local %g", cfg.rope.theta, cfg.rope_local_theta);
    /* left out, a field takes Gemma3TextConfig's default; without layer_types every 6th layer is global */
    const char *bare = "{\"model_type\": \"gemma3_text\", \"num_hidden_layers\": 7, \"hidden_size\": 64, "
                       "\"num_attention_heads\": 8, \"intermediate_size\": 32, \"vocab_size\": 300, \"pad_token_id\": null}";
    char path[900];
    snprintf(path, sizeof path, "%s/config.json", test_tmpdir());
    FILE *f = fopen(path, "w");
    fputs(bare, f);
    fclose(f);
    REQUIRE(hf_read_config(test_tmpdir(), &cfg, err) == 0, "%s", err);
    CHECK(cfg.head_dim == 256 && cfg.num_kv_heads == 4 && cfg.sliding_window == 4096 && cfg.query_pre_attn_scalar == 256.0f &&
              cfg.rope.theta == 1e6 && cfg.rope_local_theta == 1e4 && cfg.max_seq_len == 131072 && !cfg.untied_head &&
              !cfg.has_pad_token && cfg.norm_eps == 1e-6f && gpt_layer_is_sliding(&cfg, 4) && !gpt_layer_is_sliding(&cfg, 5) &&
              gpt_layer_is_sliding(&cfg, 6),
          "gemma3 defaults: hd %d NKV %d W %d scalar %g theta %g local %g T %d untied %d pad %d", cfg.head_dim,
          cfg.num_kv_heads, cfg.sliding_window, cfg.query_pre_attn_scalar, cfg.rope.theta, cfg.rope_local_theta,
          cfg.max_seq_len, cfg.untied_head, cfg.has_pad_token);
}

TEST(a_gemma3_config_json_is_written_as_transformers_writes_gemma3_text) {
    GPTConfig cfg = config_of(&GEMMA3);
    cfg.logit_softcap = 30.0f;
    char buf[8192];
    REQUIRE(hf_config_json(&cfg, -1, -1, buf, sizeof buf) > 0, "no config.json");
    const char *has[] = {"\"architectures\": [\"Gemma3ForCausalLM\"]", "\"model_type\": \"gemma3_text\"",
                         "\"layer_types\": [\n    \"sliding_attention\",\n    \"full_attention\",\n    \"sliding_attention\"\n  ],",
                         "\"sliding_window\": 5,", "\"rope_local_base_freq\": 20000.0,", "\"query_pre_attn_scalar\": 12,",
                         "\"final_logit_softcapping\": 30.0,", "\"hidden_activation\": \"gelu_pytorch_tanh\",",
                         "\"rope_scaling\": {\n    \"factor\": 4.0,\n    \"rope_type\": \"linear\"\n  },",
                         "\"rope_theta\": 1000000.0,", "\"pad_token_id\": 0,", "\"head_dim\": 8,",
                         "\"tie_word_embeddings\": true,", "\"attn_logit_softcapping\": null,"};
    for (size_t k = 0; k < sizeof has / sizeof has[0]; k++)
        CHECK(strstr(buf, has[k]), "config.json lacks %s:\n%s", has[k], buf);
    CHECK(!strstr(buf, "sliding_window_pattern") && !strstr(buf, "hidden_act\""), "config.json has a field transformers "
          "does not write here:\n%s", buf);
    /* a preset's pattern is written besides, for the transformers releases before layer_types */
    GPTConfig preset = cfg;
    preset.sliding_window_pattern = 2;
    CHECK(hf_config_json(&preset, -1, -1, buf, sizeof buf) > 0 && strstr(buf, "\"sliding_window_pattern\": 2,"),
          "no sliding_window_pattern:\n%s", buf);
    /* 128 layers' layer_types fit the buffer a checkpoint writes from */
    preset.num_layers = GPT_MAX_LAYERS;
    CHECK(hf_config_json(&preset, 7, 7, buf, sizeof buf) > 0, "a 128-layer config.json does not fit 8 KB");
}

TEST(a_gemma3_run_resumed_from_its_checkpoint_ends_bit_for_bit_and_another_window_or_cap_is_refused) {
    const char *d = test_tmpdir();
    char shard[800], args[2400], a[900];
    const char *model = "--device cpu --family gemma3 --layers 3 --heads 4 --kv-heads 2 --head-dim 8 --dim 20 "
                        "--ffn-dim 28 --max-seq-len 64 --sliding-window 5 -v 300 -b 2 -t 16 -x 4 -n 2 "
                        "--keep-checkpoints 3 -s 0 --val-every 0 --warmup 1 --logit-softcap 20";
    resume_ends_where_the_straight_run_does(model, d, shard, sizeof shard);
    char *out = NULL;
    /* the exported config is the run's: read back as gemma3 with its window, cap and every 6th layer global */
    GPTConfig got;
    char err[ERR_LEN];
    snprintf(a, sizeof a, "%s/a/step_00000004", d);
    REQUIRE(hf_read_config(a, &got, err) == 0, "%s", err);
    CHECK(got.family == FAMILY_GEMMA3 && got.sliding_window == 5 && got.logit_softcap == 20.0f &&
              gpt_layer_is_sliding(&got, 0) && gpt_layer_is_sliding(&got, 2),
          "exported: family %d window %d cap %g", got.family, got.sliding_window, (double)got.logit_softcap);
    const struct {
        const char *flags, *msg;
    } cases[] = {
        {"--sliding-window 6", "has sliding window 5 but the flags give 6 (pass --sliding-window 5)"},
        {"--logit-softcap 0", "has final_logit_softcapping 20 but the flags give 0 (leave out --logit-softcap)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(args, sizeof args, "%s %s -x 6 -y 1 -i %s -o %s/b", model, cases[i].flags, shard, d);
        const int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strstr(out, cases[i].msg), "%s: (%d) %s", cases[i].flags, rc, out);
        free(out);
    }
}

TEST(init_from_a_gemma3_checkpoint_with_another_window_or_family_is_refused_naming_the_flag) {
    char dir[800], shard[800], args[2400];
    TestTensor ts[128];
    ParamTable t;
    float *params;
    snprintf(dir, sizeof dir, "%s/g", test_tmpdir());
    snprintf(shard, sizeof shard, "%s/d.bin", test_tmpdir());
    const int n = checkpoint_in(dir, &GEMMA3, ts, &t, &params);
    REQUIRE(n > 0, "checkpoint");
    free(write_tokens(shard, 400, (uint32_t)GEMMA3.V));
    const struct {
        const char *flags, *msg;
    } cases[] = {
        {"--device cpu --sliding-window 7", "has sliding window 5 but the flags give 7 (pass --sliding-window 5)"},
        {"--device cpu --family llama", "is a gemma3 model but the flags give llama (pass --family gemma3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        snprintf(args, sizeof args, "%s --init-from %s -i %s -b 2 -t 16 -x 1 -s 0 -o %s/r", cases[i].flags, dir, shard,
                 test_tmpdir());
        const int rc = run_train(args, &out);
        CHECK(rc == 1 && out && strncmp(out, "error: ", 7) == 0 && strstr(out, cases[i].msg), "'%s': (%d) %s",
              cases[i].flags, rc, out);
        free(out);
    }
    free_tensors(ts, n);
    free(params);
    param_table_free(&t);
}
