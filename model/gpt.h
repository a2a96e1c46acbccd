/* model/gpt.h - the GPT-2 model description shared by every backend: configuration, presets and
 * the parameter table.
 *
 * Shapes: L layers, NH heads, C = d model width, HS = C/NH, V vocabulary (tokens the tokenizer
 * has), Vp = V rounded up to a multiple of 128 (the embedding's rows; the padded rows never get
 * probability mass), maxT the context length.
 *
 * The parameter table is the single description of every tensor: its HF GPT-2 name, its shape in
 * our layout (matrices are [out, in] as llm.c stores them; HF's Conv1D stores [in, out], so those
 * are transposed on export), whether AdamW decays it, and how it is initialised. Allocation, init,
 * the optimizer, checkpoints and (later) sharding all walk this table. */
#ifndef FUSEDGPT_GPT_H
#define FUSEDGPT_GPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_VOCAB_ALIGN 128
#define GPT_MAX_LAYERS 128

typedef struct {
    int num_layers;  /* L */
    int num_heads;   /* NH */
    int dim;         /* C */
    int max_seq_len; /* maxT */
    int vocab_size;  /* V */
    int padded_vocab_size; /* Vp */
} GPTConfig;

typedef struct {
    const char *name;
    int num_layers, num_heads, dim;
    const char *note; /* shown beside the name in lists (NULL: none) */
} GPTPreset;

/* The presets (model/gpt.c), ended by one whose name is NULL: the one list that --help, errors and
 * lookups read. */
extern const GPTPreset gpt_presets[];
const GPTPreset *gpt_find_preset(const char *name);
/* "tiny, d6, d12 (GPT-2 124M), ...": every preset's name and note, into buf (n bytes). */
void gpt_preset_list(char *buf, size_t n);

/* Fills Vp from V. */
void gpt_config_finish(GPTConfig *cfg);
int gpt_round_vocab(int vocab_size);

/* What a tensor is, within its layer (or for the whole model: the embeddings and the final
 * LayerNorm). */
typedef enum {
    ROLE_WTE,      /* token embedding [Vp, C], tied to the output layer */
    ROLE_WPE,      /* position embedding [maxT, C] */
    ROLE_LN1_W, ROLE_LN1_B,
    ROLE_QKV_W, ROLE_QKV_B,         /* [3C, C], [3C] */
    ROLE_ATTPROJ_W, ROLE_ATTPROJ_B, /* [C, C], [C] */
    ROLE_LN2_W, ROLE_LN2_B,
    ROLE_FC_W, ROLE_FC_B,           /* [4C, C], [4C] */
    ROLE_FCPROJ_W, ROLE_FCPROJ_B,   /* [C, 4C], [C] */
    ROLE_LNF_W, ROLE_LNF_B,
    NUM_ROLES
} ParamRole;

#define FIRST_LAYER_ROLE ROLE_LN1_W
#define NUM_LAYER_ROLES (ROLE_FCPROJ_B - ROLE_LN1_W + 1)
/* wte, wpe, ln_f weight and bias: the table holds NUM_WHOLE_ROLES + L·NUM_LAYER_ROLES tensors */
#define NUM_WHOLE_ROLES (NUM_ROLES - NUM_LAYER_ROLES)

typedef enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS } ParamInit;

typedef struct {
    char name[64];     /* HF GPT2LMHeadModel name, e.g. "transformer.h.3.attn.c_attn.weight" */
    ParamRole role;
    int layer;         /* -1 for whole-model tensors */
    int ndim;
    size_t rows, cols; /* our layout: [rows, cols]; a vector has rows = 1 */
    size_t numel;
    size_t offset;     /* into the flat parameter buffer, in elements */
    int weight_decay;  /* matrices (and embeddings) decay; biases and LayerNorm do not */
    int hf_transposed; /* HF stores it as [cols, rows] (Conv1D) */
    ParamInit init;
    float init_std;
} ParamInfo;

typedef struct {
    GPTConfig cfg;
    ParamInfo *params;
    int count;
    size_t total;                           /* elements in all tensors */
    int global_index[NUM_ROLES];            /* index for ROLE_WTE, ROLE_WPE, ROLE_LNF_* */
    int layer_index[GPT_MAX_LAYERS][NUM_LAYER_ROLES];
} ParamTable;

/* Builds the table; returns 0, or -1 with a message in err (ERR_LEN bytes). */
int param_table_build(ParamTable *t, const GPTConfig *cfg, char *err);
void param_table_free(ParamTable *t);
const ParamInfo *param_whole(const ParamTable *t, ParamRole role);
const ParamInfo *param_of_layer(const ParamTable *t, int layer, ParamRole role);

/* Pointers into one flat buffer (parameters, gradients, moments: all share the layout). */
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} LayerTensors;

LayerTensors layer_tensors(const ParamTable *t, float *base, int layer);
float *whole_tensor(const ParamTable *t, float *base, ParamRole role);

/* GPT-2 init: N(0, 0.02), residual projections scaled by 1/sqrt(2L), LayerNorm weights 1, biases
 * 0, padded embedding rows 0. Deterministic in seed. */
void param_init(const ParamTable *t, float *params, uint64_t seed);

/* Forward FLOPs per token for MFU (6·params for the matmuls + attention), as in PaLM's appendix. */
double gpt_flops_per_token(const GPTConfig *cfg, int T);

#ifdef __cplusplus
}
#endif

#endif
