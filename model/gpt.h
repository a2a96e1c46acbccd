/* model/gpt.h - the model description shared by every backend: the family configuration, presets
 * and the parameter table.
 *
 * Shapes: L layers, NH query heads, NKV key/value heads, hd head_dim (its own number: C/NH for
 * GPT-2, 128 at C = 1024 for Qwen3-0.6B), C = d model width, F the MLP's hidden width, V vocabulary
 * (tokens the tokenizer has), Vp = V rounded up to a multiple of 128 (the embedding's rows; the
 * padded rows never get probability mass), maxT the context length.
 *
 * A family is data: the config holds every switch a block needs, and the table holds one row per
 * Hugging Face tensor with its HF name, in the order embeddings, layers, tail. Rows the kernels
 * want fused are one row of the table made of the HF tensors stacked row-wise (q, k, v as one
 * [(NH + 2·NKV)·hd, C] matrix; gate, up as one [2F, C]); the row lists their HF names and row counts
 * (ParamInfo.part), so import and export are plain copies. Matrices are [out, in] in our layout;
 * HF's GPT-2 Conv1D stores [in, out], so those are transposed on export. Allocation, init, the
 * optimizer, checkpoints, gradient buckets and sharding all walk this table. */
#ifndef FUSEDGPT_GPT_H
#define FUSEDGPT_GPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rotary position embeddings as config.json's rope_theta and rope_scaling give them. A
 * zero-initialised RopeParams is invalid (theta 0); theta 10000 with ROPE_SCALING_NONE is the
 * original RoPE. */
typedef enum {
    ROPE_SCALING_NONE,   /* no rope_scaling, or rope_type "default" */
    ROPE_SCALING_LINEAR, /* rope_type "linear": every frequency divided by factor (positions / factor) */
    ROPE_SCALING_LLAMA3, /* rope_type "llama3": low frequencies divided by factor, high ones kept, a
                          * smooth blend between (transformers' _compute_llama3_parameters) */
} RopeScaling;

typedef struct {
    double theta; /* rope_theta: 5e5 for Llama 3, 1e6 for Qwen3 */
    RopeScaling scaling;
    double factor;                           /* linear, llama3: 8 for Llama 3.1, 32 for 3.2 */
    double low_freq_factor, high_freq_factor; /* llama3: 1 and 4 in Llama 3.x */
    double original_max_position_embeddings; /* llama3: 8192 in Llama 3.x */
} RopeParams;

#define GPT_VOCAB_ALIGN 128
#define GPT_MAX_LAYERS 128
/* The widest dim, ffn dim, or heads x head dim a model may have: the shapes' int arithmetic (4 dim,
 * heads x head dim) stays far from overflow, and the widest released models take about 53k (the MLP
 * of Llama 3.1 405B). */
#define GPT_MAX_WIDTH (1 << 18)

typedef enum { FAMILY_GPT2, FAMILY_LLAMA, FAMILY_QWEN2, FAMILY_QWEN3, FAMILY_GEMMA3 } ModelFamily;
typedef enum {
    NORM_LAYERNORM,         /* LayerNorm with weight and bias (GPT-2) */
    NORM_RMSNORM,           /* RMSNorm, x·w (Llama, Qwen) */
    NORM_RMSNORM_ONE_PLUS_W /* RMSNorm, x·(1 + w) (Gemma) */
} NormKind;
typedef enum { POS_LEARNED, POS_ROPE } PositionKind;
typedef enum {
    MLP_GELU,   /* GELU(x·W_fc)·W_proj, with biases (GPT-2) */
    MLP_SWIGLU, /* (silu(gate)·up)·down (Llama, Qwen) */
    MLP_GEGLU   /* (gelu_tanh(gate)·up)·down (Gemma) */
} MlpKind;

/* Gemma's embedding scale sqrt(C), which transformers keeps in fp32 and casts to the dtype it holds
 * the weights in: the checkpoint's torch_dtype (a released Gemma's bfloat16 gives 25.25 at C = 640,
 * 34.0 at 1152); the values are state.bin's. */
typedef enum { EMBED_SCALE_NONE = 0, EMBED_SCALE_BF16 = 1, EMBED_SCALE_F32 = 2, EMBED_SCALE_F16 = 3 } EmbedScale;

/* Every field left 0 takes GPT-2's value (gpt_config_finish fills them in), so a zero-initialised
 * config with layers, heads, dim, maxT and V is GPT-2. gpt_family_defaults sets the switches of
 * the other families. */
typedef struct {
    int num_layers;  /* L */
    int num_heads;   /* NH */
    int dim;         /* C */
    int max_seq_len; /* maxT */
    int vocab_size;  /* V */
    int padded_vocab_size; /* Vp */
    ModelFamily family;
    int num_kv_heads; /* NKV; 0: NH */
    int head_dim;     /* hd; 0: C/NH */
    int ffn_dim;      /* F; 0: 4C */
    NormKind norm;
    float norm_eps;   /* 0: 1e-5 */
    PositionKind positions;
    RopeParams rope;  /* POS_ROPE only */
    MlpKind mlp;
    int qk_norm;      /* RMSNorm over hd of every query and key head, before RoPE (Qwen3) */
    int qkv_bias;     /* q, k, v projections have a bias (Qwen2); GPT-2's every linear has one */
    int untied_head;  /* the output layer has its own matrix (lm_head.weight), not the embedding */
    /* Gemma 3's switches (Gemma3TextConfig); all 0 elsewhere */
    int sandwich_norm;  /* each branch's output is normed before the residual add (post_attention_layernorm,
                         * post_feedforward_layernorm), and the MLP's input norm is pre_feedforward_layernorm */
    EmbedScale embed_scale; /* the token embedding is multiplied by sqrt(C), rounded (gpt_embed_scale) */
    float query_pre_attn_scalar; /* attention scale query_pre_attn_scalar^-1/2; 0: hd^-1/2 */
    int sliding_window; /* W: a sliding layer's query t sees keys t - W < t2 <= t */
    int sliding_window_pattern; /* P > 0: layer l is global when (l + 1) % P == 0 and slides otherwise
                                 * (transformers' layer_types when config.json has none); 0: layer_sliding */
    unsigned char layer_sliding[GPT_MAX_LAYERS]; /* config.json's layer_types: 1 for "sliding_attention" */
    double rope_local_theta; /* rope_local_base_freq: the sliding layers' RoPE base, unscaled; 0: cfg.rope */
    int has_pad_token;  /* the embedding is an nn.Embedding with padding_idx = pad_token_id: that row starts
                         * at 0 and its lookups pass it no gradient (the tied head still does) */
    int pad_token_id;
    float logit_softcap; /* the output logits become cap·tanh(z/cap) before the softmax (config.json's
                          * final_logit_softcapping); 0: none */
} GPTConfig;

typedef struct {
    const char *name;
    int num_layers, num_heads, dim;
    const char *note; /* shown beside the name in lists (NULL: none) */
    /* GPT-2 when left out; the other families' shapes and RoPE (theta 0: the family's default) */
    ModelFamily family;
    int num_kv_heads, head_dim, ffn_dim;
    RopeParams rope;
    int sliding_window; /* 0: the family's default */
    int vocab_size; /* a released model's vocabulary (0: -v's default) */
    int max_seq_len; /* a released model's context, its config.json's max_position_embeddings (0: the
                      * --max-seq-len default); with RoPE it bounds T and sizes nothing else */
} GPTPreset;

/* The presets (model/gpt.c), ended by one whose name is NULL: the one list that --help, errors and
 * lookups read. */
extern const GPTPreset gpt_presets[];
const GPTPreset *gpt_find_preset(const char *name);
/* "tiny, d6, d12 (GPT-2 124M), ...": every preset's name and note, into buf (n bytes). */
void gpt_preset_list(char *buf, size_t n);

/* Fills Vp from V and gives every field left 0 its GPT-2 value (NKV = NH, hd = C/NH, F = 4C,
 * eps 1e-5). Idempotent. */
void gpt_config_finish(GPTConfig *cfg);

/* The model's logit cap (cfg->logit_softcap; none: unchanged) on n logits in place: the logits a
 * backend reports for sampling are the capped ones, as transformers' are. */
void gpt_cap_logits(const GPTConfig *cfg, float *logits, int n);
/* Sets the switches of a family as its Hugging Face config class defaults them (norm and eps,
 * RoPE theta, MLP, QK-norm, QKV bias); the shape fields are left as they are. */
void gpt_family_defaults(GPTConfig *cfg, ModelFamily family);
const char *gpt_family_name(ModelFamily family);
/* The family named ("gpt2", "llama", "qwen2", "qwen3", "gemma3"); 0, or -1 for another name. */
int gpt_family_parse(const char *name, ModelFamily *family);
int gpt_round_vocab(int vocab_size);
/* Whether layer l attends through the sliding window (sliding_window_pattern, else layer_sliding). */
int gpt_layer_is_sliding(const GPTConfig *cfg, int l);
/* Layer l's rotary embedding: rope_local_theta unscaled on sliding layers (when set), cfg->rope
 * elsewhere. */
RopeParams gpt_layer_rope(const GPTConfig *cfg, int l);
/* The first layer that turns by the sliding layers' own RoPE base (rope_local_theta), or -1 when
 * none does: the backends keep a second pair of rotation tables when there is one. */
int gpt_first_local_rope_layer(const GPTConfig *cfg);
/* The token whose embedding row gets no gradient from its lookups (pad_token_id with has_pad_token),
 * or -1. */
int gpt_embed_pad_token(const GPTConfig *cfg);
/* What the token embedding is multiplied by: 1, or sqrt(C) rounded to embed_scale's dtype. */
float gpt_embed_scale(const GPTConfig *cfg);
/* The attention's scale: query_pre_attn_scalar^-1/2 when set, else hd^-1/2. */
float gpt_attention_scale(const GPTConfig *cfg);

/* What a tensor is, within its layer (or for the whole model: the embeddings and the tail). A
 * family has the roles its config asks for; the others have no row. */
typedef enum {
    ROLE_WTE,      /* token embedding [Vp, C]; the output layer's matrix unless the head is untied */
    ROLE_WPE,      /* position embedding [maxT, C] (learned positions) */
    ROLE_LN1_W, ROLE_LN1_B,         /* the attention's norm; bias: LayerNorm */
    ROLE_QKV_W, ROLE_QKV_B,         /* [(NH + 2·NKV)·hd, C], [(NH + 2·NKV)·hd] */
    ROLE_QNORM_W, ROLE_KNORM_W,     /* QK-norm [hd] each */
    ROLE_ATTPROJ_W, ROLE_ATTPROJ_B, /* [C, NH·hd], [C] */
    ROLE_ATTPOST_W,                 /* sandwich norms: the attention output's norm [C] */
    ROLE_LN2_W, ROLE_LN2_B,         /* the MLP's input norm */
    ROLE_FC_W, ROLE_FC_B,           /* [F, C], [F] (GELU); [2F, C] gate then up (gated MLPs) */
    ROLE_FCPROJ_W, ROLE_FCPROJ_B,   /* [C, F], [C] */
    ROLE_MLPPOST_W,                 /* sandwich norms: the MLP output's norm [C] */
    ROLE_LNF_W, ROLE_LNF_B,
    ROLE_LM_HEAD,                   /* untied output layer [Vp, C] */
    NUM_ROLES
} ParamRole;

#define FIRST_LAYER_ROLE ROLE_LN1_W
#define NUM_LAYER_ROLES (ROLE_MLPPOST_W - ROLE_LN1_W + 1)
#define NUM_WHOLE_ROLES (NUM_ROLES - NUM_LAYER_ROLES)
/* A table row made of this many HF tensors at most (q, k, v). */
#define MAX_HF_PARTS 3

typedef enum { INIT_NORMAL, INIT_ONES, INIT_ZEROS } ParamInit;

typedef struct {
    char name[64];  /* HF name of one tensor ("model.layers.3.self_attn.o_proj.weight"); the row's
                     * name in messages when it packs several ("model.layers.3.self_attn.{q,k,v}_proj.weight") */
    size_t rows;    /* the HF tensor's first dimension: rows of the packed matrix (elements of a
                     * packed vector, a bias) it fills, after the parts before it */
} HfPart;

typedef struct {
    char name[64];     /* HF name, e.g. "transformer.h.3.attn.c_attn.weight" */
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
    int num_parts;     /* 0: the HF tensor `name`; else the row stacks these HF tensors, in order */
    HfPart part[MAX_HF_PARTS];
} ParamInfo;

typedef struct {
    GPTConfig cfg;
    ParamInfo *params;
    int count;
    size_t total;                           /* elements in all tensors */
    int global_index[NUM_ROLES];            /* index of a whole-model role's row; -1: none */
    int layer_index[GPT_MAX_LAYERS][NUM_LAYER_ROLES]; /* -1: the family has no such row */
    size_t layer_begin[GPT_MAX_LAYERS + 1]; /* offset of layer l's first row; [L]: the tail's */
} ParamTable;

/* Builds the table (t->cfg: cfg finished); returns 0, or -1 with a message in err (ERR_LEN bytes)
 * when the shape is not one the blocks compute (NH not a multiple of NKV, odd hd with RoPE, ...). */
int param_table_build(ParamTable *t, const GPTConfig *cfg, char *err);
void param_table_free(ParamTable *t);
/* NULL when the family has no such row. */
const ParamInfo *param_whole(const ParamTable *t, ParamRole role);
const ParamInfo *param_of_layer(const ParamTable *t, int layer, ParamRole role);

/* Pointers into one flat buffer (parameters, gradients, moments: all share the layout). */
/* Pointers into one flat buffer (parameters, gradients, moments: all share the layout); NULL for a
 * row the family does not have. */
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *qnormw, *knormw, *attprojw, *attprojb, *attpostw;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb, *mlppostw;
} LayerTensors;

LayerTensors layer_tensors(const ParamTable *t, float *base, int layer);
float *whole_tensor(const ParamTable *t, float *base, ParamRole role);
/* The output layer's matrix [Vp, C]: lm_head when untied, else the token embedding. */
ParamRole head_role(const GPTConfig *cfg);

/* Init: N(0, 0.02), residual projections scaled by 1/sqrt(2L) for GPT-2 (the other families
 * initialise every matrix as their HF class does, N(0, 0.02)), norm weights 1 (0 for 1 + w), biases
 * 0, padded vocabulary rows and the pad token's embedding row 0. Deterministic in seed, whatever the
 * number of threads. */
void param_init(const ParamTable *t, float *params, uint64_t seed);

/* The widths of one block's activations per token: C; q, k, v packed ((NH + 2·NKV)·hd); the
 * attention's output (NH·hd); the MLP's hidden width F and its input rows FW (2F, gate then up, for a
 * gated MLP). Both backends size their buffers from it. */
typedef struct {
    size_t C, QW, AW, F, FW;
} BlockWidths;
BlockWidths gpt_block_widths(const GPTConfig *cfg);

/* Training FLOPs per token for MFU (6·params for the matmuls + attention by hd and NH), as in PaLM's
 * appendix; a sliding layer's attention in proportion to the pairs its window leaves. */
double gpt_flops_per_token(const GPTConfig *cfg, int T);

#ifdef __cplusplus
}
#endif

#endif
