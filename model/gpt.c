/* model/gpt.c - presets, the parameter table and GPT-2 initialisation. */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/rng.h"
#include "kernels/host_device.h"

const GPTPreset gpt_presets[] = {
    {"tiny", 2, 2, 128, NULL}, /* CPU smoke tests and CI; head size 64, as the GPU attention needs */
    {"d6", 6, 6, 384, NULL},
    {"d12", 12, 12, 768, "GPT-2 124M"},
    {"d24", 24, 16, 1024, NULL},
    {"d36", 36, 20, 1280, NULL},
    {"d48", 48, 25, 1600, NULL},
    {NULL, 0, 0, 0, NULL},
};

const GPTPreset *gpt_find_preset(const char *name) {
    for (const GPTPreset *p = gpt_presets; p->name; p++)
        if (strcmp(p->name, name) == 0) return p;
    return NULL;
}

void gpt_preset_list(char *buf, size_t n) {
    size_t len = 0;
    buf[0] = '\0';
    for (const GPTPreset *p = gpt_presets; p->name && len < n; p++) {
        len += (size_t)snprintf(buf + len, n - len, "%s%s", p == gpt_presets ? "" : ", ", p->name);
        if (p->note && len < n) len += (size_t)snprintf(buf + len, n - len, " (%s)", p->note);
    }
}

int gpt_round_vocab(int vocab_size) {
    return (int)round_up(vocab_size, GPT_VOCAB_ALIGN);
}

void gpt_config_finish(GPTConfig *cfg) {
    cfg->padded_vocab_size = gpt_round_vocab(cfg->vocab_size);
}

static void add_param(ParamTable *t, const char *name, ParamRole role, int layer, size_t rows,
                      size_t cols, int ndim, int decay, int hf_transposed, ParamInit init, float std) {
    ParamInfo *p = &t->params[t->count];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->role = role;
    p->layer = layer;
    p->ndim = ndim;
    p->rows = rows;
    p->cols = cols;
    p->numel = rows * cols;
    p->offset = t->total;
    p->weight_decay = decay;
    p->hf_transposed = hf_transposed;
    p->init = init;
    p->init_std = std;
    if (layer < 0)
        t->global_index[role] = t->count;
    else
        t->layer_index[layer][role - FIRST_LAYER_ROLE] = t->count;
    t->total += p->numel;
    t->count++;
}

int param_table_build(ParamTable *t, const GPTConfig *cfg, char *err) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    int L = cfg->num_layers;
    size_t C = (size_t)cfg->dim;
    if (L < 1 || L > GPT_MAX_LAYERS) {
        snprintf(err, ERR_LEN, "--layers %d is out of range (1..%d)", L, GPT_MAX_LAYERS);
        return -1;
    }
    t->params = calloc(NUM_WHOLE_ROLES + (size_t)L * NUM_LAYER_ROLES, sizeof(ParamInfo));
    if (!t->params) {
        snprintf(err, ERR_LEN, "out of host memory for the parameter table");
        return -1;
    }
    const float std = 0.02f;
    /* Projections that write into the residual stream are scaled so the stream's variance does not
     * grow with depth (GPT-2 paper, section 2.3). */
    const float residual_std = std / sqrtf(2.0f * (float)L);
    char name[64];
    add_param(t, "transformer.wte.weight", ROLE_WTE, -1, cfg->padded_vocab_size, C, 2, 1, 0, INIT_NORMAL, std);
    add_param(t, "transformer.wpe.weight", ROLE_WPE, -1, cfg->max_seq_len, C, 2, 1, 0, INIT_NORMAL, std);
    for (int l = 0; l < L; l++) {
#define LAYER_PARAM(suffix, role, rows, cols, ndim, decay, tr, init, sd)              \
    snprintf(name, sizeof name, "transformer.h.%d.%s", l, suffix);                  \
    add_param(t, name, role, l, rows, cols, ndim, decay, tr, init, sd)
        LAYER_PARAM("ln_1.weight", ROLE_LN1_W, 1, C, 1, 0, 0, INIT_ONES, 0);
        LAYER_PARAM("ln_1.bias", ROLE_LN1_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("attn.c_attn.weight", ROLE_QKV_W, 3 * C, C, 2, 1, 1, INIT_NORMAL, std);
        LAYER_PARAM("attn.c_attn.bias", ROLE_QKV_B, 1, 3 * C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("attn.c_proj.weight", ROLE_ATTPROJ_W, C, C, 2, 1, 1, INIT_NORMAL, residual_std);
        LAYER_PARAM("attn.c_proj.bias", ROLE_ATTPROJ_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("ln_2.weight", ROLE_LN2_W, 1, C, 1, 0, 0, INIT_ONES, 0);
        LAYER_PARAM("ln_2.bias", ROLE_LN2_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("mlp.c_fc.weight", ROLE_FC_W, 4 * C, C, 2, 1, 1, INIT_NORMAL, std);
        LAYER_PARAM("mlp.c_fc.bias", ROLE_FC_B, 1, 4 * C, 1, 0, 0, INIT_ZEROS, 0);
        LAYER_PARAM("mlp.c_proj.weight", ROLE_FCPROJ_W, C, 4 * C, 2, 1, 1, INIT_NORMAL, residual_std);
        LAYER_PARAM("mlp.c_proj.bias", ROLE_FCPROJ_B, 1, C, 1, 0, 0, INIT_ZEROS, 0);
#undef LAYER_PARAM
    }
    add_param(t, "transformer.ln_f.weight", ROLE_LNF_W, -1, 1, C, 1, 0, 0, INIT_ONES, 0);
    add_param(t, "transformer.ln_f.bias", ROLE_LNF_B, -1, 1, C, 1, 0, 0, INIT_ZEROS, 0);
    return 0;
}

void param_table_free(ParamTable *t) {
    free(t->params);
    t->params = NULL;
    t->count = 0;
}

const ParamInfo *param_whole(const ParamTable *t, ParamRole role) {
    return &t->params[t->global_index[role]];
}

const ParamInfo *param_of_layer(const ParamTable *t, int layer, ParamRole role) {
    return &t->params[t->layer_index[layer][role - FIRST_LAYER_ROLE]];
}

LayerTensors layer_tensors(const ParamTable *t, float *base, int l) {
#define AT(role) (base + param_of_layer(t, l, role)->offset)
    LayerTensors lt = {
        AT(ROLE_LN1_W), AT(ROLE_LN1_B), AT(ROLE_QKV_W),  AT(ROLE_QKV_B),
        AT(ROLE_ATTPROJ_W), AT(ROLE_ATTPROJ_B), AT(ROLE_LN2_W), AT(ROLE_LN2_B),
        AT(ROLE_FC_W), AT(ROLE_FC_B), AT(ROLE_FCPROJ_W), AT(ROLE_FCPROJ_B),
    };
#undef AT
    return lt;
}

float *whole_tensor(const ParamTable *t, float *base, ParamRole role) {
    return base + param_whole(t, role)->offset;
}

void param_init(const ParamTable *t, float *params, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    for (int i = 0; i < t->count; i++) {
        const ParamInfo *p = &t->params[i];
        float *x = params + p->offset;
        for (size_t j = 0; j < p->numel; j++) {
            switch (p->init) {
            case INIT_NORMAL: x[j] = (float)(rng_normal(&rng) * p->init_std); break;
            case INIT_ONES: x[j] = 1.0f; break;
            case INIT_ZEROS: x[j] = 0.0f; break;
            }
        }
    }
    /* Padded embedding rows stay zero: they are never a target and get no probability mass, so
     * they never receive gradient either; zero keeps exported checkpoints clean. */
    const ParamInfo *wte = param_whole(t, ROLE_WTE);
    size_t V = (size_t)t->cfg.vocab_size, C = wte->cols;
    for (size_t j = V * C; j < wte->numel; j++) params[wte->offset + j] = 0.0f;
}

double gpt_flops_per_token(const GPTConfig *cfg, int T) {
    /* PaLM's count (appendix B), as llm.c and the peers' MFU figures use it: 6 FLOPs per matmul
     * parameter per token for forward + backward (the tied output projection counts, the position
     * embedding does not), plus 12·L·C·T for attention's QK^T and AV (causal masking not credited). */
    double C = cfg->dim, L = cfg->num_layers;
    double matmul_params = L * 12.0 * C * C + (double)cfg->vocab_size * C;
    return 6.0 * matmul_params + 12.0 * L * C * T;
}
