/* model/cuda/backend_cuda.cu - the CUDA backend: the GPT-2 step from the kernels in kernels/, either
 * output layer, AdamW on fp32 master weights or on bf16 state (OptimizerState, model/backend.h).
 *
 * Shapes: B, T, C, NH, L, V, Vp; N = B·T. Weights and activations bf16; gradients, LayerNorm
 * statistics, attention log-sum-exp and the loss fp32; master weights and AdamW moments fp32, or
 * no master and bf16 moments. Parameter buffers (bf16 weights, grads, master, m, v) all use the
 * parameter table's flat layout, so one offset addresses a tensor in each.
 *
 * Per GPT-2 layer the forward keeps: ln1, qkv, atty (+ lse), residual2, ln2, fch_pre, fch_gelu and
 * residual3, 16·C bf16 values per token. The two projections that feed the residual stream
 * (attproj, fcproj) are consumed by the next residual add and live in one shared buffer each. When
 * the micro-batch would not fit otherwise, fch_gelu is not kept either (12·C per token): the
 * backward recomputes it from fch_pre, one elementwise pass per layer.
 * The residual add before each LayerNorm is fused into it (residual_layernorm_forward).
 * A RoPE family's layer keeps the projection's qkv (before QK-norm and RoPE), atty (+ lse),
 * residual2, the gate/up rows and residual3, with the norms' 1/rms, and with QK-norm the normed and
 * rotated q, k (qkv); the backward recomputes ln1 and ln2 from the residuals (one RMSNorm pass each)
 * and the gated product from the gate/up rows (in the pass that computes their gradient), each into
 * one buffer shared by the layers; the attention reads the value heads from the projection's rows,
 * so they are never copied. At Qwen3-0.6B's widths that keeps 18·C values per token and layer
 * instead of 23·C. When that does not fit (or recompute_gelu asks), the levels give way in turn:
 * 1, the rotated q, k recomputed from the projection's (one RoPE pass a layer, about 1.4 % of a
 * step at Qwen3-0.6B's widths) into one shared buffer (14·C); 2, the gate/up rows not kept either
 * (8·C): the backward runs their GEMM again, about 4 % of a step.
 *
 * Llama and Qwen (RoPE families) run their own block, picking its operations from the config as
 * the CPU backend does: RMSNorm (fused with the residual add) -> qkv [+ bias: Qwen2] -> [QK-norm:
 * Qwen3] + RoPE (one kernel) -> grouped-query attention -> o_proj -> RMSNorm -> gate/up -> SwiGLU
 * -> down; token embedding alone; the head tied to it or lm_head. Widths: QW = (NH + 2·NKV)·hd the
 * packed qkv, AW = NH·hd the attention output, F the MLP's hidden width, FW its first projection's
 * (F, or 2F gate then up). GPT-2's block (QW = 3C, AW = C, FW = F = 4C) is unchanged.
 * Gemma 3 is the same block with the config's other switches: norms by 1 + w, QK-norm, GeGLU, the
 * embedding scaled by sqrt(C) in its checkpoint's dtype (the tied head reads it unscaled), sliding
 * layers with their own RoPE base and window beside global ones, the attention scale
 * query_pre_attn_scalar^-1/2, and sandwich norms: each branch's projection is normed before the residual add, so a layer also keeps
 * the two projections' outputs and their norms' 1/rms (2·C values per token).
 *
 * Data parallel (model/dist/grad_sync.h): each rank scales its gradients by 1/world and the ranks sum
 * them, during the backward of the step's last micro-batch. Under ZeRO-1 master weights, moments
 * and reduced gradients exist only for this rank's shard ("state" below: the shard, or the whole
 * layout without ZeRO-1); bf16 weights and the accumulating gradients stay whole.
 * Vocabulary parallel (model/dist/vocab_parallel.h): the head (lm_head, or a tied head's token
 * embedding) lives in its own slice buffers, and the flat buffers, the buckets and the AdamW plan
 * hold the other rows ("replicated": the table without the head's row, offsets from 0, which the
 * step addresses them by as cb->t; they start at `flat0` in the whole table's layout, which the
 * host's state arrays keep); P below counts those. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/cuda_check.h"
#include "kernels/kernels.h"
#include "kernels/output_layer.h"
#include "model/backend.h"
#include "model/cuda/host_transfer.h"
#include "model/dist/dist.h"
#include "model/dist/grad_sync.h"
#include "model/dist/vocab_parallel.h"
#include "model/memory_estimate.h"

extern "C" {
#include "model/cpu/llama_layers_cpu.h" /* rope_inv_freq, rope_cos_sin: both backends' tables */
}

/* One layer's saved activations (pointers into the activation arena; some point at one buffer
 * that every layer shares, see layout_arena). */
typedef struct {
    kbf16 *ln1, *qkv, *atty, *residual2, *ln2, *fch_pre, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse; /* means: LayerNorm only */
    kbf16 *qkv_proj; /* [N,QW] the projection's output before QK-norm (Qwen3), where the attention reads
                      * the value heads; else RoPE runs in place on qkv and qkv_proj is qkv */
    float *qk_rstd;  /* [N,NH+NKV] QK-norm's */
    /* sandwich norms: o_proj's and down_proj's outputs [N,C] before their norms, and the norms' 1/rms */
    kbf16 *attproj, *fcproj;
    float *attpost_rstd, *mlppost_rstd;
} CudaLayerActs;

typedef struct {
    Backend base;
    const ParamTable *t;
    cudaStream_t stream;
    HostStaging *staging; /* read_state's and write_state's pinned pieces, made at the first call */
    kbf16 *params;                 /* bf16 weights, table layout (padded_total) */
    const Dist *exchange;          /* ZeRO-1: params come from dist_alloc_exchanged (its weight gather) */
    float *grads;                  /* fp32, table layout (padded_total) */
    int grads_exchanged;           /* grads come from dist_alloc_exchanged too (the rank sum reads them) */
    float *master, *m, *v;         /* fp32, state_elems: table layout, or this rank's shard (NULL: bf16 state) */
    kbf16 *m_bf16, *v_bf16;        /* the same under OPTIMIZER_STATE_BF16, which keeps no master (else NULL) */
    float *state_grads;            /* the reduced gradients AdamW reads: grads, or the shard's */
    size_t padded_total, state_elems;
    GradSync *sync;                /* NULL when training alone */
    VocabParallel *vp;             /* the head's slice and its layer; NULL: the whole head here */
    int vp_world;                  /* ranks the head is split over (0: not split) */
    ParamTable replicated;         /* the rows the flat buffers hold: the table, or all but the head */
    ParamInfo *replicated_rows;    /* their rows (vocabulary parallel) */
    size_t flat0;                  /* where they start in the whole table's layout */
    size_t P;                      /* their values */
    size_t sync_bytes;             /* what sync allocated */
    AdamWPlan *adamw;
    void *arena;                   /* every activation and scratch buffer, one allocation */
    size_t arena_bytes;
    kbf16 *encoded, *lnf;
    kbf16 *attproj, *fcproj; /* [N,C] each: what a layer's branches add to the residual stream (the
                              * projections, or with sandwich norms their norms' outputs) */
    kbf16 *gelu_tmp;         /* [N,F] when recompute_gelu, or for a RoPE family: every layer's fch_gelu, one
                              * at a time */
    kbf16 *ln_tmp;           /* [N,C] RoPE families: every layer's ln1 and ln2, one at a time */
    kbf16 *qkv_rot;          /* [N,QW] QK-norm families when recompute_gelu: every layer's rotated query and
                              * key heads, one at a time (its value columns are never written: see qkv_proj) */
    kbf16 *fch_tmp;          /* [N,FW] when recompute_gelu == 2: every layer's fch_pre, one at a time */
    int recompute_gelu;      /* 1: the MLP's activation (always for the RoPE families) and QK-norm's rotated
                              * q, k; 2: the MLP's input too */
    float *lnf_mean, *lnf_rstd;
    CudaLayerActs *layer;
    /* backward scratch, reused by every layer */
    kbf16 *dres, *dlnf, *dfch;
    kbf16 *dln; /* [N,C] the gradient at a norm's input, or at a sandwich norm's input (a projection's output) */
    kbf16 *datty, *dqkv;
    kbf16 *dact;            /* [N,F] gated MLPs off the products: the gradient of the activation's output */
    int gated_products;     /* every layer's gated MLP runs on the products that carry its activation
                             * (kernels/gated_mlp.cu), which never store that gradient */
    float *rope_cos, *rope_sin; /* [T, hd/2] for positions 0..T-1 (RoPE families) */
    float *rope_local_cos, *rope_local_sin; /* the same for the sliding layers' own base (when they have one) */
    void *scratch; /* the largest of the kernels' scratch needs */
    size_t scratch_bytes;
    int *d_inputs, *d_targets;
    int *d_positions;   /* the micro-batch's positions in their documents (backend.h) */
    const int *pos;     /* d_positions while the micro-batch has them, else NULL */
    float *d_loss;     /* [3]: mean loss, objective, lse (one copy to the host) */
    float *d_row_loss; /* [N] per-token loss */
    double *d_sumsq;
    kbf16 *d_logits_row; /* [Vp], sampling */
    OutputLayer *out;
    size_t out_ws_bytes;
    size_t fused_budget;  /* the fused layer's chunk budget as it runs (0: streaming), after the fit */
    char out_ws_label[96]; /* the memory table's line for the workspace of the layer that runs */
    /* marks between the parts of a micro-step, and the milliseconds they took since phase_ms read
     * them: body forward, output layer forward+backward, body backward */
    cudaEvent_t mark[4];
    double part_ms[3];
} CudaBackend;

static int is_rope(const GPTConfig *cfg) {
    return cfg->positions == POS_ROPE;
}

/* The one place that lays out the arena: with base == NULL it only counts. Every buffer starts on
 * a 256-byte boundary (the kernels want 16). */
static size_t layout_arena(CudaBackend *cb, char *base) {
    const GPTConfig *cfg = &cb->t->cfg;
    const BlockWidths w = gpt_block_widths(cfg);
    size_t B = cb->base.B, T = cb->base.T, C = cfg->dim, NH = cfg->num_heads, N = B * T;
    const int layernorm = cfg->norm == NORM_LAYERNORM, rope = is_rope(cfg), gated = cfg->mlp != MLP_GELU;
    const int recompute_act = rope || cb->recompute_gelu, shared_rotated = cfg->qk_norm && cb->recompute_gelu;
    size_t off = 0;
#define TAKE(ptr, type, count)                                        \
    do {                                                              \
        if (base) (ptr) = (type *)(base + off);                       \
        off += round_up((count) * sizeof(type), 256);                 \
    } while (0)
    TAKE(cb->encoded, kbf16, N * C);
    for (int l = 0; l < cfg->num_layers; l++) {
        CudaLayerActs *a = &cb->layer[l];
        if (!rope) TAKE(a->ln1, kbf16, N * C);
        if (cfg->qk_norm) {
            TAKE(a->qkv_proj, kbf16, N * w.QW);
            TAKE(a->qk_rstd, float, N * (size_t)(cfg->num_heads + cfg->num_kv_heads));
            if (!shared_rotated) TAKE(a->qkv, kbf16, N * w.QW);
        } else {
            TAKE(a->qkv, kbf16, N * w.QW);
            if (base) a->qkv_proj = a->qkv;
        }
        TAKE(a->atty, kbf16, N * w.AW);
        if (cfg->sandwich_norm) {
            TAKE(a->attproj, kbf16, N * C);
            TAKE(a->fcproj, kbf16, N * C);
            TAKE(a->attpost_rstd, float, N);
            TAKE(a->mlppost_rstd, float, N);
        }
        TAKE(a->residual2, kbf16, N * C);
        if (!rope) TAKE(a->ln2, kbf16, N * C);
        if (cb->recompute_gelu < 2) TAKE(a->fch_pre, kbf16, N * w.FW);
        if (!recompute_act) TAKE(a->fch_gelu, kbf16, N * w.F);
        TAKE(a->residual3, kbf16, N * C);
        if (layernorm) TAKE(a->ln1_mean, float, N);
        TAKE(a->ln1_rstd, float, N);
        if (layernorm) TAKE(a->ln2_mean, float, N);
        TAKE(a->ln2_rstd, float, N);
        TAKE(a->att_lse, float, B * NH * T);
    }
    TAKE(cb->attproj, kbf16, N * C);
    TAKE(cb->fcproj, kbf16, N * C);
    if (recompute_act) {
        TAKE(cb->gelu_tmp, kbf16, N * w.F);
        for (int l = 0; base && l < cfg->num_layers; l++) cb->layer[l].fch_gelu = cb->gelu_tmp;
    }
    if (cb->recompute_gelu == 2) {
        TAKE(cb->fch_tmp, kbf16, N * w.FW);
        for (int l = 0; base && l < cfg->num_layers; l++) cb->layer[l].fch_pre = cb->fch_tmp;
    }
    if (rope) {
        TAKE(cb->ln_tmp, kbf16, N * C);
        for (int l = 0; base && l < cfg->num_layers; l++) cb->layer[l].ln1 = cb->layer[l].ln2 = cb->ln_tmp;
    }
    if (shared_rotated) {
        TAKE(cb->qkv_rot, kbf16, N * w.QW);
        for (int l = 0; base && l < cfg->num_layers; l++) cb->layer[l].qkv = cb->qkv_rot;
    }
    TAKE(cb->lnf, kbf16, N * C);
    if (layernorm) TAKE(cb->lnf_mean, float, N);
    TAKE(cb->lnf_rstd, float, N);
    TAKE(cb->dres, kbf16, N * C);
    TAKE(cb->dlnf, kbf16, N * C);
    TAKE(cb->dfch, kbf16, N * w.FW);
    if (gated && !cb->gated_products) TAKE(cb->dact, kbf16, N * w.F);
    TAKE(cb->dln, kbf16, N * C);
    TAKE(cb->datty, kbf16, N * w.AW);
    TAKE(cb->dqkv, kbf16, N * w.QW);
    if (rope) {
        TAKE(cb->rope_cos, float, T * (size_t)cfg->head_dim / 2);
        TAKE(cb->rope_sin, float, T * (size_t)cfg->head_dim / 2);
    }
    if (gpt_first_local_rope_layer(cfg) >= 0) {
        TAKE(cb->rope_local_cos, float, T * (size_t)cfg->head_dim / 2);
        TAKE(cb->rope_local_sin, float, T * (size_t)cfg->head_dim / 2);
    }
    TAKE(cb->scratch, char, cb->scratch_bytes);
    TAKE(cb->d_inputs, int, N);
    TAKE(cb->d_positions, int, N);
    TAKE(cb->d_targets, int, N);
    TAKE(cb->d_loss, float, 3);
    TAKE(cb->d_row_loss, float, N);
    TAKE(cb->d_sumsq, double, 1);
    TAKE(cb->d_logits_row, kbf16, (size_t)cfg->padded_vocab_size);
#undef TAKE
    return off;
}

static size_t max_size(size_t a, size_t b) {
    return a > b ? a : b;
}

/* Layer l's attention over B sequences of T rows: its window (sliding layers) and the family's
 * scale (Gemma's query_pre_attn_scalar^-1/2). */
static AttentionShape attention_shape(const GPTConfig *cfg, int l, int B, int T, const int *pos) {
    AttentionShape a = {B, T, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim, 0.0f, 0, pos};
    a.scale = is_rope(cfg) ? gpt_attention_scale(cfg) : 1.0f / sqrtf((float)cfg->head_dim);
    a.window = gpt_layer_is_sliding(cfg, l) ? cfg->sliding_window : 0;
    return a;
}

/* Layer l's rotation tables [T, hd/2]: the sliding layers' own, or the global ones. */
static void layer_rope(const CudaBackend *cb, int l, const float **cos_t, const float **sin_t) {
    const int local = cb->rope_local_cos && gpt_layer_is_sliding(&cb->t->cfg, l);
    *cos_t = local ? cb->rope_local_cos : cb->rope_cos;
    *sin_t = local ? cb->rope_local_sin : cb->rope_sin;
}

static RopeShape rope_shape(const GPTConfig *cfg, int B, int T, const int *pos) {
    RopeShape r = {B, T, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim, cfg->norm_eps,
                   cfg->norm == NORM_RMSNORM_ONE_PLUS_W, pos};
    return r;
}

static size_t scratch_needed(const GPTConfig *cfg, int B, int T) {
    int N = B * T, C = cfg->dim;
    const BlockWidths w = gpt_block_widths(cfg);
    const AttentionShape as = attention_shape(cfg, 0, B, T, NULL); /* the scratch depends on neither mask */
    size_t s = encoder_backward_scratch_bytes(N, cfg->padded_vocab_size);
    s = max_size(s, attention_backward_scratch_bytes(&as));
    s = max_size(s, global_sumsq_scratch_bytes());
    if (is_rope(cfg)) {
        const RopeShape rs = rope_shape(cfg, B, T, NULL);
        s = max_size(s, rmsnorm_backward_scratch_bytes(C));
        s = max_size(s, rope_backward_scratch_bytes(&rs));
        if (cfg->qkv_bias) s = max_size(s, bias_backward_scratch_bytes((int)w.QW));
    } else {
        s = max_size(s, layernorm_backward_scratch_bytes(C));
        s = max_size(s, bias_backward_scratch_bytes(4 * C));
    }
    return s;
}

static kbf16 *param_bf16(CudaBackend *cb, const ParamInfo *p) {
    return cb->params + p->offset;
}

/* A row the family may not have (a bias, a QK-norm weight): NULL when it has none. */
static kbf16 *param_bf16_opt(CudaBackend *cb, const ParamInfo *p) {
    return p ? cb->params + p->offset : NULL;
}

/* The embeddings of the body forward's rows [t0, t0 + B·T) into encoded: token (scaled: Gemma)
 * and, where the family has them, learned positions. A tied head split by --vocab-parallel looks
 * its rows up over every rank's tokens (a whole micro-batch: sampling is refused before). */
static void forward_embed(CudaBackend *cb, int t0, int B, int T) {
    const GPTConfig *cfg = &cb->t->cfg;
    const size_t r = (size_t)t0, C = (size_t)cfg->dim;
    const kbf16 *wpe = param_bf16_opt(cb, param_whole(cb->t, ROLE_WPE));
    grad_sync_weights_ready(cb->sync, -1, cb->stream);
    if (vocab_parallel_tied(cb->vp)) {
        vocab_parallel_embed(cb->vp, cb->encoded, cb->d_inputs, wpe, T, cb->stream);
        return;
    }
    encoder_forward(cb->encoded + r * C, cb->d_inputs + r, cb->pos, param_bf16(cb, param_whole(cb->t, ROLE_WTE)),
                    wpe ? wpe + r * C : NULL, gpt_embed_scale(cfg), B, T, (int)C, cb->stream);
}

/* The body's forward over the activation rows [t0, t0 + B·T), whose tokens are in d_inputs
 * already: with t0 = 0, B sequences of T tokens (a micro-batch, or a prompt with B = 1); with
 * t0 > 0, one token (B = T = 1) at position t0 of sequence 0, whose attention reads the keys and
 * values that rows 0..t0-1 of each layer's qkv still hold (the sampling cache). Every other layer
 * works row by row, so it runs here on the rows given. */
static void forward_body_gpt2(CudaBackend *cb, int t0, int B, int T) {
    const ParamTable *t = cb->t;
    const GPTConfig *cfg = &t->cfg;
    int C = cfg->dim, N = B * T;
    const size_t r = (size_t)t0; /* the first row */
    cudaStream_t s = cb->stream;
    forward_embed(cb, t0, B, T);
    for (int l = 0; l < cfg->num_layers; l++) {
        grad_sync_weights_ready(cb->sync, l, s);
        CudaLayerActs *a = &cb->layer[l];
        CudaLayerActs *prev = l > 0 ? &cb->layer[l - 1] : NULL;
#define P(role) param_bf16(cb, param_of_layer(t, l, role))
        /* ln1 = LN(previous residual2 + previous fcproj), which also stores that sum (residual3) */
        if (l == 0)
            residual_layernorm_forward(NULL, a->ln1 + r * C, a->ln1_mean + r, a->ln1_rstd + r, cb->encoded + r * C,
                                       NULL, P(ROLE_LN1_W), P(ROLE_LN1_B), N, C, s);
        else
            residual_layernorm_forward(prev->residual3 + r * C, a->ln1 + r * C, a->ln1_mean + r, a->ln1_rstd + r,
                                       prev->residual2 + r * C, cb->fcproj + r * C, P(ROLE_LN1_W), P(ROLE_LN1_B), N,
                                       C, s);
        const kbf16 *residual_in = (l == 0 ? cb->encoded : prev->residual3) + r * C;
        matmul_forward(a->qkv + r * 3 * C, NULL, a->ln1 + r * C, P(ROLE_QKV_W), P(ROLE_QKV_B), N, C, 3 * C, s);
        const AttentionShape as = attention_shape(cfg, l, B, T, cb->pos);
        if (t0 == 0)
            attention_forward(a->atty, a->att_lse, a->qkv, NULL, &as, s);
        else
            attention_decode(a->atty + r * C, a->qkv, NULL, t0, &as, s);
        matmul_forward(cb->attproj + r * C, NULL, a->atty + r * C, P(ROLE_ATTPROJ_W), P(ROLE_ATTPROJ_B), N, C, C, s);
        residual_layernorm_forward(a->residual2 + r * C, a->ln2 + r * C, a->ln2_mean + r, a->ln2_rstd + r,
                                   residual_in, cb->attproj + r * C, P(ROLE_LN2_W), P(ROLE_LN2_B), N, C, s);
        matmul_forward(a->fch_gelu + r * 4 * C, a->fch_pre + r * 4 * C, a->ln2 + r * C, P(ROLE_FC_W), P(ROLE_FC_B),
                       N, C, 4 * C, s);
        matmul_forward(cb->fcproj + r * C, NULL, a->fch_gelu + r * 4 * C, P(ROLE_FCPROJ_W), P(ROLE_FCPROJ_B), N,
                       4 * C, C, s);
#undef P
    }
    grad_sync_weights_ready(cb->sync, cfg->num_layers, s); /* the final norm, and an untied head after it */
    CudaLayerActs *last = &cb->layer[cfg->num_layers - 1];
    residual_layernorm_forward(last->residual3 + r * C, cb->lnf + r * C, cb->lnf_mean + r, cb->lnf_rstd + r,
                               last->residual2 + r * C, cb->fcproj + r * C, param_bf16(cb, param_whole(t, ROLE_LNF_W)),
                               param_bf16(cb, param_whole(t, ROLE_LNF_B)), N, C, s);
}

/* A branch's output projection into out, the buffer the residual add reads (rows from r on); under
 * a sandwich norm (Gemma) the projection is kept and its RMSNorm (post_w) goes to out. */
static void branch_projection_forward(CudaBackend *cb, kbf16 *out, kbf16 *kept, float *post_rstd, size_t r,
                                      const kbf16 *in, const kbf16 *w, const kbf16 *post_w, int N, int K) {
    const GPTConfig *cfg = &cb->t->cfg;
    const int C = cfg->dim;
    if (!cfg->sandwich_norm) {
        matmul_forward(out + r * C, NULL, in, w, NULL, N, K, C, cb->stream);
        return;
    }
    matmul_forward(kept + r * C, NULL, in, w, NULL, N, K, C, cb->stream);
    residual_rmsnorm_forward(NULL, out + r * C, post_rstd + r, kept + r * C, NULL, post_w, N, C, cfg->norm_eps,
                             cfg->norm == NORM_RMSNORM_ONE_PLUS_W, cb->stream);
}

/* The gradient of a branch's output projection: the residual stream's (dres), or under a sandwich
 * norm its post-norm's backward of it (into dln; the norm weight's gradient into dpost_w). */
static const kbf16 *branch_projection_grad(CudaBackend *cb, float *dpost_w, const kbf16 *kept, const kbf16 *post_w,
                                           const float *post_rstd, int N) {
    const GPTConfig *cfg = &cb->t->cfg;
    const int C = cfg->dim;
    if (!cfg->sandwich_norm) return cb->dres;
    CUDA_CHECK(cudaMemsetAsync(cb->dln, 0, (size_t)N * C * sizeof(kbf16), cb->stream));
    rmsnorm_backward(cb->dln, dpost_w, cb->scratch, cb->dres, kept, post_w, post_rstd, N, C,
                     cfg->norm == NORM_RMSNORM_ONE_PLUS_W, cb->stream);
    return cb->dln;
}

/* The RoPE families' body forward, over the same rows as forward_body_gpt2. Decoding (t0 > 0)
 * rotates the row by position t0's angles and attends to the rows before it. With sandwich norms
 * (Gemma) each branch's projection is kept and normed into the buffer the residual add reads. */
static void forward_body_rope(CudaBackend *cb, int t0, int B, int T) {
    const ParamTable *t = cb->t;
    const GPTConfig *cfg = &t->cfg;
    const BlockWidths w = gpt_block_widths(cfg);
    const int C = cfg->dim, N = B * T, one_plus_w = cfg->norm == NORM_RMSNORM_ONE_PLUS_W;
    const size_t r = (size_t)t0, half = (size_t)cfg->head_dim / 2;
    const float eps = cfg->norm_eps;
    const GatedAct act = cfg->mlp == MLP_GEGLU ? GATED_GELU_TANH : GATED_SILU;
    const RopeShape rs = rope_shape(cfg, B, T, cb->pos);
    cudaStream_t s = cb->stream;
    forward_embed(cb, t0, B, T);
    for (int l = 0; l < cfg->num_layers; l++) {
        grad_sync_weights_ready(cb->sync, l, s);
        CudaLayerActs *a = &cb->layer[l];
        CudaLayerActs *prev = l > 0 ? &cb->layer[l - 1] : NULL;
        const float *cos_t, *sin_t;
        layer_rope(cb, l, &cos_t, &sin_t);
#define P(role) param_bf16_opt(cb, param_of_layer(t, l, role))
        /* ln1 = RMSNorm(previous residual2 + previous MLP branch), which stores that sum */
        if (l == 0)
            residual_rmsnorm_forward(NULL, a->ln1 + r * C, a->ln1_rstd + r, cb->encoded + r * C, NULL, P(ROLE_LN1_W),
                                     N, C, eps, one_plus_w, s);
        else
            residual_rmsnorm_forward(prev->residual3 + r * C, a->ln1 + r * C, a->ln1_rstd + r, prev->residual2 + r * C,
                                     cb->fcproj + r * C, P(ROLE_LN1_W), N, C, eps, one_plus_w, s);
        const kbf16 *residual_in = (l == 0 ? cb->encoded : prev->residual3) + r * C;
        matmul_forward(a->qkv_proj + r * w.QW, NULL, a->ln1 + r * C, P(ROLE_QKV_W), P(ROLE_QKV_B), N, C, (int)w.QW, s);
        if (cfg->qk_norm && t0 > 0 && cb->recompute_gelu) {
            /* the rotated rows are shared by the layers, so the cache is the projections': rotate
             * this layer's rows 0..t0 again */
            const RopeShape upto = rope_shape(cfg, 1, t0 + 1, NULL);
            rope_forward(a->qkv, a->qk_rstd, a->qkv_proj, P(ROLE_QNORM_W), P(ROLE_KNORM_W), cos_t, sin_t, &upto, s);
        } else {
            rope_forward(a->qkv + r * w.QW,
                         a->qk_rstd ? a->qk_rstd + r * (size_t)(cfg->num_heads + cfg->num_kv_heads) : NULL,
                         a->qkv_proj + r * w.QW, P(ROLE_QNORM_W), P(ROLE_KNORM_W), cos_t + r * half, sin_t + r * half,
                         &rs, s);
        }
        const AttentionShape as = attention_shape(cfg, l, B, T, cb->pos);
        if (t0 == 0)
            attention_forward(a->atty, a->att_lse, a->qkv, a->qkv_proj, &as, s);
        else
            attention_decode(a->atty + r * w.AW, a->qkv, a->qkv_proj, t0, &as, s);
        branch_projection_forward(cb, cb->attproj, a->attproj, a->attpost_rstd, r, a->atty + r * w.AW,
                                  P(ROLE_ATTPROJ_W), P(ROLE_ATTPOST_W), N, (int)w.AW);
        residual_rmsnorm_forward(a->residual2 + r * C, a->ln2 + r * C, a->ln2_rstd + r, residual_in,
                                 cb->attproj + r * C, P(ROLE_LN2_W), N, C, eps, one_plus_w, s);
        if (cb->gated_products) {
            gated_mlp_forward(a->fch_pre + r * w.FW, a->fch_gelu + r * w.F, a->ln2 + r * C, P(ROLE_FC_W), (size_t)N, C,
                              (int)w.F, act, s);
        } else {
            matmul_forward(a->fch_pre + r * w.FW, NULL, a->ln2 + r * C, P(ROLE_FC_W), NULL, N, C, (int)w.FW, s);
            gated_forward(a->fch_gelu + r * w.F, a->fch_pre + r * w.FW, (size_t)N, (int)w.F, act, s);
        }
        branch_projection_forward(cb, cb->fcproj, a->fcproj, a->mlppost_rstd, r, a->fch_gelu + r * w.F,
                                  P(ROLE_FCPROJ_W), P(ROLE_MLPPOST_W), N, (int)w.F);
#undef P
    }
    grad_sync_weights_ready(cb->sync, cfg->num_layers, s); /* the final norm, and an untied head after it */
    CudaLayerActs *last = &cb->layer[cfg->num_layers - 1];
    residual_rmsnorm_forward(last->residual3 + r * C, cb->lnf + r * C, cb->lnf_rstd + r, last->residual2 + r * C,
                             cb->fcproj + r * C, param_bf16(cb, param_whole(t, ROLE_LNF_W)), N, C, eps, one_plus_w, s);
}

static void forward_body(CudaBackend *cb, int t0, int B, int T) {
    if (is_rope(&cb->t->cfg))
        forward_body_rope(cb, t0, B, T);
    else
        forward_body_gpt2(cb, t0, B, T);
}

/* Tokens of rows [t0, t0 + n) into d_inputs; the rows are at positions t (sampling). */
static void upload_inputs(CudaBackend *cb, const int *tokens, int t0, int n) {
    CUDA_CHECK(cudaMemcpyAsync(cb->d_inputs + t0, tokens, (size_t)n * sizeof(int), cudaMemcpyHostToDevice,
                               cb->stream));
    cb->pos = NULL;
}

/* A micro-batch's tokens and their positions in their documents (NULL: none, backend.h). */
static void upload_batch(CudaBackend *cb, const int *tokens, const int *positions) {
    const size_t n = (size_t)cb->base.B * cb->base.T;
    upload_inputs(cb, tokens, 0, (int)n);
    if (positions)
        CUDA_CHECK(cudaMemcpyAsync(cb->d_positions, positions, n * sizeof(int), cudaMemcpyHostToDevice, cb->stream));
    cb->pos = positions ? cb->d_positions : NULL;
}

static OutputLayerArgs output_args(CudaBackend *cb, float grad_scale) {
    OutputLayerArgs a;
    memset(&a, 0, sizeof a);
    if (cb->vp) return a; /* the head is not here */
    a.H = cb->lnf;
    a.W = param_bf16(cb, param_whole(cb->t, head_role(&cb->t->cfg)));
    a.targets = cb->d_targets;
    a.N = (int64_t)cb->base.B * cb->base.T;
    a.reduction = OUTPUT_REDUCE_MEAN;
    a.grad_scale = grad_scale;
    a.loss = cb->d_loss;
    a.objective = cb->d_loss + 1;
    a.lse_reduced = cb->d_loss + 2;
    a.row_loss = cb->d_row_loss;
    a.options = backend_loss_options(&cb->base);
    a.dH = cb->dlnf;
    a.dW = cb->grads + param_whole(cb->t, head_role(&cb->t->cfg))->offset;
    return a;
}

static void upload_targets(CudaBackend *cb, const int *targets) {
    size_t n = (size_t)cb->base.B * cb->base.T;
    CUDA_CHECK(cudaMemcpyAsync(cb->d_targets, targets, n * sizeof(int), cudaMemcpyHostToDevice, cb->stream));
}

/* The loss; the objective and mean lse go to the backend's last_* fields. */
static float read_loss(CudaBackend *cb) {
    float v[3];
    CUDA_CHECK(cudaMemcpyAsync(v, cb->d_loss, sizeof v, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    cb->base.last_objective = v[1], cb->base.last_mean_lse = v[2];
    /* plain cross-entropy: the objective is the loss */
    if (cb->vp) cb->base.last_objective = v[0], cb->base.last_mean_lse = vocab_parallel_mean_lse(cb->vp, cb->stream);
    return v[0];
}

static void refuse_with_split_head(const CudaBackend *cb, const char *what) {
    if (!cb->vp) return;
    fprintf(stderr, "error: %s needs the whole output layer, which --vocab-parallel splits over the ranks (run it "
                    "from a checkpoint without --vocab-parallel)\n", what);
    exit(1);
}

static void cuda_row_losses(Backend *be, float *out) {
    CudaBackend *cb = (CudaBackend *)be;
    refuse_with_split_head(cb, "per-token losses");
    CUDA_CHECK(cudaMemcpyAsync(out, cb->d_row_loss, (size_t)be->B * be->T * sizeof(float), cudaMemcpyDeviceToHost,
                               cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
}

static float cuda_eval_loss(Backend *be, const int *inputs, const int *targets, const int *positions) {
    CudaBackend *cb = (CudaBackend *)be;
    upload_batch(cb, inputs, positions);
    forward_body(cb, 0, be->B, be->T);
    upload_targets(cb, targets);
    OutputLayerArgs a = output_args(cb, 0.0f);
    if (cb->vp)
        vocab_parallel_output(cb->vp, cb->lnf, cb->d_targets, 0.0f, NULL, cb->d_loss, cb->stream);
    else if (output_layer_forward(cb->out, &a, cb->stream) != 0) {
        fprintf(stderr, "error: output layer rejected its arguments (%s:%d)\n", __FILE__, __LINE__);
        exit(1);
    }
    return read_loss(cb);
}

/* The embeddings' backward from dres, the residual stream's gradient below layer 0, and its sync:
 * grad_sync does it itself over every rank's micro-batch when it owns the encoder, the
 * vocabulary-parallel layer for a tied head's slice. The RoPE families have no position table
 * (whole_tensor gives NULL); Gemma scales its embedding and gives the pad token's row no gradient. */
static void backward_encoder(CudaBackend *cb, GradSync *sync) {
    const ParamTable *t = cb->t;
    float *grads = cb->grads;
    if (vocab_parallel_tied(cb->vp)) {
        /* the token embedding is the head's slice, which takes every rank's rows; the position
         * table (GPT-2) stays data parallel */
        vocab_parallel_embed_backward(cb->vp, cb->dres, cb->stream);
        if (param_whole(t, ROLE_WPE))
            encoder_backward(NULL, whole_tensor(t, grads, ROLE_WPE), cb->scratch, cb->dres, cb->d_inputs, cb->pos, 1.0f, -1,
                             cb->base.B, cb->base.T, t->cfg.dim, t->cfg.padded_vocab_size, cb->stream);
        grad_sync_ready(sync, SYNC_AFTER_ENCODER, -1, grads, cb->stream);
        return;
    }
    if (sync && grad_sync_owns_encoder(sync)) {
        grad_sync_encoder(sync, grads, cb->dres, cb->d_inputs, cb->pos, cb->stream);
        return;
    }
    encoder_backward(whole_tensor(t, grads, ROLE_WTE), whole_tensor(t, grads, ROLE_WPE), cb->scratch, cb->dres,
                     cb->d_inputs, cb->pos, gpt_embed_scale(&t->cfg), gpt_embed_pad_token(&t->cfg), cb->base.B, cb->base.T,
                     t->cfg.dim, t->cfg.padded_vocab_size, cb->stream);
    grad_sync_ready(sync, SYNC_AFTER_ENCODER, -1, grads, cb->stream);
}

/* GPT-2's body backward, from dlnf (the output layer's dH) down to the embeddings' gradients;
 * sync (NULL: none) gets the data-parallel hooks as each part's gradients are final. */
static void backward_body_gpt2(CudaBackend *cb, GradSync *sync) {
    const ParamTable *t = cb->t;
    const GPTConfig *cfg = &t->cfg;
    int B = cb->base.B, T = cb->base.T, C = cfg->dim, N = B * T;
    cudaStream_t s = cb->stream;
    float *grads = cb->grads;
    const AttentionShape as = attention_shape(cfg, 0, B, T, cb->pos); /* GPT-2 has no sliding layers */
    /* dres is the gradient of the residual stream; each LayerNorm backward ADDS into it. */
    CUDA_CHECK(cudaMemsetAsync(cb->dres, 0, (size_t)N * C * sizeof(kbf16), s));
    CudaLayerActs *last = &cb->layer[cfg->num_layers - 1];
    /* Each LayerNorm backward also sums the residual gradient it leaves, which is the dout of the
     * projection below it (fcproj, attproj): that projection's bias gradient, saved a pass. */
    layernorm_backward(cb->dres, cb->grads + param_whole(t, ROLE_LNF_W)->offset,
                       cb->grads + param_whole(t, ROLE_LNF_B)->offset,
                       layer_tensors(t, cb->grads, cfg->num_layers - 1).fcprojb, cb->scratch, cb->dlnf,
                       last->residual3, param_bf16(cb, param_whole(t, ROLE_LNF_W)), cb->lnf_mean, cb->lnf_rstd, N,
                       C, s);
    grad_sync_ready(sync, SYNC_AFTER_LNF, -1, grads, s);
    for (int l = cfg->num_layers - 1; l >= 0; l--) {
        CudaLayerActs *a = &cb->layer[l];
        LayerTensors g = layer_tensors(t, cb->grads, l);
        const kbf16 *residual_in = l == 0 ? cb->encoded : cb->layer[l - 1].residual3;
#define P(role) param_bf16(cb, param_of_layer(t, l, role))
        /* MLP: the dGELU epilogue turns d(fch_gelu) into d(fch_pre) inside the matmul */
        if (cb->recompute_gelu) gelu_forward(a->fch_gelu, a->fch_pre, (size_t)N * 4 * C, s);
        /* fcproj's bias gradient came with the LayerNorm backward above this layer */
        matmul_backward(cb->dfch, g.fcprojw, NULL, cb->scratch, cb->dres, a->fch_gelu, P(ROLE_FCPROJ_W), a->fch_pre,
                        N, 4 * C, C, s);
        matmul_backward(cb->dln, g.fcw, g.fcb, cb->scratch, cb->dfch, a->ln2, P(ROLE_FC_W), NULL, N, C, 4 * C, s);
        layernorm_backward(cb->dres, g.ln2w, g.ln2b, g.attprojb, cb->scratch, cb->dln, a->residual2, P(ROLE_LN2_W),
                           a->ln2_mean, a->ln2_rstd, N, C, s);
        /* attention */
        matmul_backward(cb->datty, g.attprojw, NULL, cb->scratch, cb->dres, a->atty, P(ROLE_ATTPROJ_W), NULL, N, C,
                        C, s);
        /* qkv's bias gradient is summed as the attention backward stores dqkv */
        attention_backward(cb->dqkv, g.qkvb, cb->scratch, cb->datty, a->qkv, NULL, a->atty, a->att_lse, &as, s);
        matmul_backward(cb->dln, g.qkvw, NULL, cb->scratch, cb->dqkv, a->ln1, P(ROLE_QKV_W), NULL, N, C, 3 * C, s);
        /* below layer 0 is the encoder, which has no bias */
        layernorm_backward(cb->dres, g.ln1w, g.ln1b, l > 0 ? layer_tensors(t, cb->grads, l - 1).fcprojb : NULL,
                           cb->scratch, cb->dln, residual_in, P(ROLE_LN1_W), a->ln1_mean, a->ln1_rstd, N, C, s);
#undef P
        grad_sync_ready(sync, SYNC_AFTER_LAYER, l, grads, s);
    }
    backward_encoder(cb, sync);
}

/* The RoPE families' body backward, as backward_body_gpt2. Every norm backward ADDS into dres,
 * the residual stream's gradient; under a sandwich norm (Gemma) the branch's projection gets that
 * norm's backward of dres, in dln (cleared first: the norm backward adds), which the projection's
 * backward reads before anything else writes dln. */
static void backward_body_rope(CudaBackend *cb, GradSync *sync) {
    const ParamTable *t = cb->t;
    const GPTConfig *cfg = &t->cfg;
    const BlockWidths w = gpt_block_widths(cfg);
    const int B = cb->base.B, T = cb->base.T, C = cfg->dim, N = B * T;
    const int one_plus_w = cfg->norm == NORM_RMSNORM_ONE_PLUS_W;
    const GatedAct act = cfg->mlp == MLP_GEGLU ? GATED_GELU_TANH : GATED_SILU;
    const RopeShape rs = rope_shape(cfg, B, T, cb->pos);
    cudaStream_t s = cb->stream;
    float *grads = cb->grads;
    CUDA_CHECK(cudaMemsetAsync(cb->dres, 0, (size_t)N * C * sizeof(kbf16), s));
    rmsnorm_backward(cb->dres, whole_tensor(t, grads, ROLE_LNF_W), cb->scratch, cb->dlnf,
                     cb->layer[cfg->num_layers - 1].residual3, param_bf16(cb, param_whole(t, ROLE_LNF_W)),
                     cb->lnf_rstd, N, C, one_plus_w, s);
    grad_sync_ready(sync, SYNC_AFTER_LNF, -1, grads, s);
    for (int l = cfg->num_layers - 1; l >= 0; l--) {
        CudaLayerActs *a = &cb->layer[l];
        LayerTensors g = layer_tensors(t, grads, l);
        const kbf16 *residual_in = l == 0 ? cb->encoded : cb->layer[l - 1].residual3;
        const AttentionShape as = attention_shape(cfg, l, B, T, cb->pos);
        const float *cos_t, *sin_t;
        layer_rope(cb, l, &cos_t, &sin_t);
#define P(role) param_bf16_opt(cb, param_of_layer(t, l, role))
        /* MLP; its input (ln2, whose rstd is rewritten unchanged) and [the gate/up rows] are
         * recomputed, and the gated product is re-formed by the activation's backward (which reads
         * gate/up anyway) before the down projection's weight gradient needs it */
        residual_rmsnorm_forward(NULL, a->ln2, a->ln2_rstd, a->residual2, NULL, P(ROLE_LN2_W), N, C, cfg->norm_eps,
                                 one_plus_w, s);
        if (cb->recompute_gelu == 2) { /* the forward's bits: its product, whichever path ran it */
            if (cb->gated_products)
                gated_mlp_forward(a->fch_pre, a->fch_gelu, a->ln2, P(ROLE_FC_W), (size_t)N, C, (int)w.F, act, s);
            else
                matmul_forward(a->fch_pre, NULL, a->ln2, P(ROLE_FC_W), NULL, N, C, (int)w.FW, s);
        }
        const kbf16 *dfcproj = branch_projection_grad(cb, g.mlppostw, a->fcproj, P(ROLE_MLPPOST_W), a->mlppost_rstd, N);
        if (cb->gated_products) {
            gated_mlp_backward(cb->dfch, a->fch_gelu, dfcproj, P(ROLE_FCPROJ_W), a->fch_pre, (size_t)N, C, (int)w.F,
                               act, s);
        } else {
            matmul_backward(cb->dact, NULL, NULL, NULL, dfcproj, NULL, P(ROLE_FCPROJ_W), NULL, N, (int)w.F, C, s);
            gated_backward(cb->dfch, a->fch_gelu, cb->dact, a->fch_pre, (size_t)N, (int)w.F, act, s);
        }
        matmul_backward(NULL, g.fcprojw, NULL, NULL, dfcproj, a->fch_gelu, NULL, NULL, N, (int)w.F, C, s);
        matmul_backward(cb->dln, g.fcw, NULL, NULL, cb->dfch, a->ln2, P(ROLE_FC_W), NULL, N, C, (int)w.FW, s);
        rmsnorm_backward(cb->dres, g.ln2w, cb->scratch, cb->dln, a->residual2, P(ROLE_LN2_W), a->ln2_rstd, N, C,
                         one_plus_w, s);
        /* attention; dqkv becomes the projection's gradient in place (RoPE's transpose, QK-norm's
         * backward), so qkv's bias gradient is the projection's own column sum, not attention's */
        const kbf16 *dattproj = branch_projection_grad(cb, g.attpostw, a->attproj, P(ROLE_ATTPOST_W), a->attpost_rstd,
                                                       N);
        matmul_backward(cb->datty, g.attprojw, NULL, NULL, dattproj, a->atty, P(ROLE_ATTPROJ_W), NULL, N, (int)w.AW,
                        C, s);
        if (cfg->qk_norm && cb->recompute_gelu)
            rope_forward(a->qkv, a->qk_rstd, a->qkv_proj, P(ROLE_QNORM_W), P(ROLE_KNORM_W), cos_t, sin_t, &rs, s);
        attention_backward(cb->dqkv, NULL, cb->scratch, cb->datty, a->qkv, a->qkv_proj, a->atty, a->att_lse, &as,
                           s);
        rope_backward(cb->dqkv, g.qnormw, g.knormw, cb->scratch, cb->dqkv, a->qkv_proj, P(ROLE_QNORM_W),
                      P(ROLE_KNORM_W), a->qk_rstd, cos_t, sin_t, &rs, s);
        residual_rmsnorm_forward(NULL, a->ln1, a->ln1_rstd, residual_in, NULL, P(ROLE_LN1_W), N, C, cfg->norm_eps,
                                 one_plus_w, s);
        matmul_backward(cb->dln, g.qkvw, g.qkvb, cb->scratch, cb->dqkv, a->ln1, P(ROLE_QKV_W), NULL, N, C, (int)w.QW,
                        s);
        rmsnorm_backward(cb->dres, g.ln1w, cb->scratch, cb->dln, residual_in, P(ROLE_LN1_W), a->ln1_rstd, N, C,
                         one_plus_w, s);
#undef P
        grad_sync_ready(sync, SYNC_AFTER_LAYER, l, grads, s);
    }
    backward_encoder(cb, sync);
}

static void backward_body(CudaBackend *cb, GradSync *sync) {
    if (is_rope(&cb->t->cfg))
        backward_body_rope(cb, sync);
    else
        backward_body_gpt2(cb, sync);
}

static float cuda_train_micro_step(Backend *be, const int *inputs, const int *targets, const int *positions,
                                   float loss_scale, int last_micro) {
    CudaBackend *cb = (CudaBackend *)be;
    int B = be->B, T = be->T;
    cudaStream_t s = cb->stream;
    GradSync *sync = last_micro ? cb->sync : NULL; /* hooks only in the step's last backward */
    float *grads = cb->grads;
    CUDA_CHECK(cudaEventRecord(cb->mark[0], s));
    upload_batch(cb, inputs, positions);
    forward_body(cb, 0, B, T);
    CUDA_CHECK(cudaEventRecord(cb->mark[1], s));
    upload_targets(cb, targets);
    /* ranks sum their gradients: each contributes 1/world of the mean; the vocabulary-parallel
     * layer's dH is already of the mean over every rank's rows */
    OutputLayerArgs oa = output_args(cb, cb->sync ? loss_scale / (float)be->dist->world : loss_scale);
    if (cb->vp)
        vocab_parallel_output(cb->vp, cb->lnf, cb->d_targets, loss_scale, cb->dlnf, cb->d_loss, s);
    else if (output_layer_forward_backward(cb->out, &oa, s) != 0) {
        fprintf(stderr, "error: output layer rejected its arguments (%s:%d)\n", __FILE__, __LINE__);
        exit(1);
    }
    grad_sync_ready(sync, SYNC_AFTER_OUTPUT, -1, grads, s);
    CUDA_CHECK(cudaEventRecord(cb->mark[2], s));
    backward_body(cb, sync);
    CUDA_CHECK(cudaEventRecord(cb->mark[3], s));
    float loss = read_loss(cb); /* synchronizes: the marks are done */
    for (int i = 0; i < 3; i++) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, cb->mark[i], cb->mark[i + 1]));
        cb->part_ms[i] += ms;
    }
    return loss;
}

static void cuda_phase_ms(Backend *be, double ms[3]) {
    CudaBackend *cb = (CudaBackend *)be;
    for (int i = 0; i < 3; i++) ms[i] = cb->part_ms[i], cb->part_ms[i] = 0.0;
}

/* The full-vocabulary logits of activation row `row` (lnf after a forward), to the host. */
static void logits_of_row(CudaBackend *cb, int row, float *logits) {
    const GPTConfig *cfg = &cb->t->cfg;
    refuse_with_split_head(cb, "sampling");
    matmul_forward(cb->d_logits_row, NULL, cb->lnf + (size_t)row * cfg->dim,
                   param_bf16(cb, param_whole(cb->t, head_role(cfg))),
                   NULL, 1, cfg->dim, cfg->padded_vocab_size, cb->stream);
    int V = cfg->vocab_size;
    uint16_t *bits = (uint16_t *)malloc((size_t)V * sizeof(uint16_t));
    if (!bits) {
        fprintf(stderr, "error: out of host memory for sampling\n");
        exit(1);
    }
    CUDA_CHECK(cudaMemcpyAsync(bits, cb->d_logits_row, (size_t)V * sizeof(uint16_t), cudaMemcpyDeviceToHost,
                               cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    for (int i = 0; i < V; i++) {
        uint32_t f = (uint32_t)bits[i] << 16;
        memcpy(&logits[i], &f, sizeof(float));
    }
    free(bits);
    gpt_cap_logits(cfg, logits, V);
}

static void cuda_logits_at(Backend *be, const int *tokens, int pos, float *logits) {
    CudaBackend *cb = (CudaBackend *)be;
    refuse_with_split_head(cb, "sampling"); /* before a forward whose embedding a tied slice would gather */
    upload_inputs(cb, tokens, 0, be->B * be->T);
    forward_body(cb, 0, be->B, be->T);
    logits_of_row(cb, pos, logits);
}

static void cuda_prefill(Backend *be, const int *tokens, int n, float *logits) {
    CudaBackend *cb = (CudaBackend *)be;
    refuse_with_split_head(cb, "sampling");
    upload_inputs(cb, tokens, 0, n);
    forward_body(cb, 0, 1, n);
    logits_of_row(cb, n - 1, logits);
}

static void cuda_decode_step(Backend *be, int token, int pos, float *logits) {
    CudaBackend *cb = (CudaBackend *)be;
    refuse_with_split_head(cb, "sampling");
    upload_inputs(cb, &token, pos, 1);
    forward_body(cb, pos, 1, 1);
    logits_of_row(cb, pos, logits);
}

static void cuda_zero_grad(Backend *be) {
    CudaBackend *cb = (CudaBackend *)be;
    CUDA_CHECK(cudaMemsetAsync(cb->grads, 0, cb->padded_total * sizeof(float), cb->stream));
    if (cb->vp) vocab_parallel_zero_grad(cb->vp, cb->stream);
}

static void cuda_reduce_grads(Backend *be) {
    CudaBackend *cb = (CudaBackend *)be;
    grad_sync_finish(cb->sync, cb->grads, cb->stream);
}

static double cuda_comm_wait_ms(Backend *be) {
    return grad_sync_wait_ms(((CudaBackend *)be)->sync);
}

static double cuda_grad_sumsq(Backend *be) {
    CudaBackend *cb = (CudaBackend *)be;
    global_sumsq(cb->d_sumsq, cb->scratch, cb->state_grads, cb->state_elems, cb->stream);
    /* ZeRO-1: each rank summed its shard */
    if (grad_sync_grad_shard(cb->sync)) dist_allreduce_sum(be->dist, cb->d_sumsq, 1, DIST_FLOAT64, cb->stream);
    double s;
    CUDA_CHECK(cudaMemcpyAsync(&s, cb->d_sumsq, sizeof s, cudaMemcpyDeviceToHost, cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    /* the head's slices are disjoint: summed once over the ranks */
    if (cb->vp) s += vocab_parallel_grad_sumsq(cb->vp, cb->d_sumsq, cb->scratch, cb->stream);
    return s;
}

static void cuda_adamw_update(Backend *be, const AdamWStep *st) {
    CudaBackend *cb = (CudaBackend *)be;
    if (be->optimizer_state == OPTIMIZER_STATE_BF16)
        adamw_update_bf16(cb->adamw, cb->params, cb->state_grads, cb->m_bf16, cb->v_bf16, cb->flat0, st->lr,
                          st->beta1, st->beta2, st->eps, st->weight_decay, st->grad_scale, st->step, cb->stream);
    else
        adamw_update(cb->adamw, cb->master, cb->params, cb->state_grads, cb->m, cb->v, st->lr, st->beta1,
                     st->beta2, st->eps, st->weight_decay, st->grad_scale, st->step, cb->stream);
    if (cb->vp) vocab_parallel_adamw(cb->vp, st, cb->stream);
    grad_sync_gather_weights(cb->sync, cb->params, cb->stream);
}

static int sharded(const CudaBackend *cb) {
    return grad_sync_grad_shard(cb->sync) != NULL;
}

/* Where bf16 moments pass through fp32 to and from the host, a buffer the step no longer needs: the
 * gradients, or under ZeRO-1 the shard's reduced gradients (leaving the gradients for the gather). */
static float *moment_staging(CudaBackend *cb) {
    return sharded(cb) ? cb->state_grads : cb->grads;
}

/* State i (0 the weights, 1 m, 2 v) in fp32 on the device: this rank's shard when *shard, else
 * the flat layout's P values. bf16 state is widened: the weights (whole on every rank) into the
 * gradients, the moments into moment_staging. */
static const float *state_fp32(CudaBackend *cb, int i, int *shard) {
    *shard = sharded(cb);
    if (cb->base.optimizer_state == OPTIMIZER_STATE_FP32) return i == 0 ? cb->master : i == 1 ? cb->m : cb->v;
    if (i == 0) {
        *shard = 0;
        convert_bf16_to_fp32(cb->grads, cb->params, cb->P, cb->stream);
        return cb->grads;
    }
    float *staging = moment_staging(cb);
    convert_bf16_to_fp32(staging, i == 1 ? cb->m_bf16 : cb->v_bf16, cb->state_elems, cb->stream);
    return staging;
}

static void cuda_read_state(Backend *be, float *params, float *m, float *v) {
    CudaBackend *cb = (CudaBackend *)be;
    /* its shard gathers go on the other communicator: with NCCL's kernels moving the weights there
     * too (no copy engines), two communicators' kernels in flight at once can deadlock */
    grad_sync_weights_wait(cb->sync, cb->stream);
    size_t n = cb->P * sizeof(float);
    float *host[3] = {params, m, v};
    for (int i = 0; i < 3; i++) {
        int shard = 0;
        const float *from = state_fp32(cb, i, &shard);
        if (shard) {
            /* every rank's shard into the gradient buffer, which the step no longer needs */
            grad_sync_gather_shard(cb->sync, from, cb->grads, cb->stream);
            from = cb->grads;
        }
        if (host[i]) copy_to_host(&cb->staging, host[i] + cb->flat0, from, n, cb->stream);
        CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    }
    if (cb->vp) vocab_parallel_read(cb->vp, params, m, v, cb->stream);
}

static void cuda_write_state(Backend *be, const float *params, const float *m, const float *v) {
    CudaBackend *cb = (CudaBackend *)be;
    size_t n = cb->P * sizeof(float);
    grad_sync_weights_wait(cb->sync, cb->stream); /* a pending gather would overwrite what this writes */
    if (params) {
        /* bf16 weights are whole on every rank: convert from a full fp32 copy (the gradient buffer) */
        copy_to_device(&cb->staging, cb->grads, params + cb->flat0, n, cb->stream);
        convert_fp32_to_bf16(cb->params, cb->grads, cb->P, cb->stream);
    }
    const float *host[3] = {params, m, v};
    const int bf16 = be->optimizer_state == OPTIMIZER_STATE_BF16;
    float *state[3] = {cb->master, cb->m, cb->v};
    kbf16 *state_bf16[3] = {NULL, cb->m_bf16, cb->v_bf16};
    for (int i = bf16; i < 3; i++) { /* bf16 state: the weights above are all there is */
        if (!host[i]) continue;
        /* bf16 state arrives in fp32 where state_fp32 widens it, then is rounded to nearest */
        float *to = bf16 ? moment_staging(cb) : state[i];
        if (sharded(cb))
            grad_sync_scatter_shard(cb->sync, host[i] + cb->flat0, to, cb->stream);
        else
            copy_to_device(&cb->staging, to, host[i] + cb->flat0, n, cb->stream);
        if (bf16) convert_fp32_to_bf16(state_bf16[i], to, cb->state_elems, cb->stream);
    }
    CUDA_CHECK(cudaMemsetAsync(cb->grads, 0, cb->padded_total * sizeof(float), cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    if (cb->vp) vocab_parallel_write(cb->vp, params, m, v, cb->stream);
}

static void cuda_read_grads(Backend *be, float *grads) {
    CudaBackend *cb = (CudaBackend *)be;
    CUDA_CHECK(cudaMemcpyAsync(grads + cb->flat0, cb->grads, cb->P * sizeof(float), cudaMemcpyDeviceToHost,
                               cb->stream));
    CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    if (cb->vp) vocab_parallel_read_grads(cb->vp, grads, cb->stream);
}

/* The workspace of the output layer that runs, then the others' for comparison, so the saving is
 * visible whichever one runs. */
static int output_workspace_items(CudaBackend *cb, MemoryItem *items) {
    const GPTConfig *cfg = &cb->t->cfg;
    const int64_t N = (int64_t)cb->base.B * cb->base.T, V = cfg->vocab_size;
    const int d = cfg->dim;
    int n = 0;
    items[n++] = MemoryItem{cb->out_ws_label, cb->out_ws_bytes, 0};
    if (cb->base.output == OUTPUT_FUSED) {
        items[n++] = MemoryItem{"output layer workspace: canonical (not used)",
                                output_layer_workspace_bytes(OUTPUT_CANONICAL, N, V, d, 0), 1};
        if (cb->fused_budget)
            items[n++] = MemoryItem{"output layer workspace: fused, streaming (not used)",
                                    output_layer_workspace_bytes(OUTPUT_FUSED, N, V, d, 0), 1};
    } else {
        items[n++] = MemoryItem{"output layer workspace: fused, streaming (not used)",
                                output_layer_workspace_bytes(OUTPUT_FUSED, N, V, d, 0), 1};
    }
    return n;
}

static int cuda_memory_items(Backend *be, MemoryItem *items) {
    CudaBackend *cb = (CudaBackend *)be;
    const ParamTable *t = cb->t;
    int n = 0;
    size_t S = cb->state_elems;
    int zero1 = sharded(cb);
    items[n++] = MemoryItem{"parameters (bf16)", cb->padded_total * sizeof(kbf16), 0};
    if (be->optimizer_state == OPTIMIZER_STATE_FP32)
        items[n++] = MemoryItem{zero1 ? "master weights (fp32, this rank's shard)" : "master weights (fp32)",
                                S * sizeof(float), 0};
    items[n++] = MemoryItem{"gradients (fp32)", cb->padded_total * sizeof(float), 0};
    if (be->optimizer_state == OPTIMIZER_STATE_FP32)
        items[n++] = MemoryItem{zero1 ? "AdamW m, v (fp32, this rank's shard)" : "AdamW m, v (fp32)",
                                2 * S * sizeof(float), 0};
    else
        items[n++] = MemoryItem{zero1 ? "AdamW m, v (bf16, this rank's shard; no master weights)"
                                      : "AdamW m, v (bf16; no master weights)",
                                2 * S * sizeof(kbf16), 0};
    if (cb->sync) items[n++] = MemoryItem{"data parallel buffers", cb->sync_bytes, 0};
    const int rotated = t->cfg.qk_norm && cb->recompute_gelu;
    const char *acts =
        cb->recompute_gelu == 2 ? (rotated ? "activations and scratch (norms, rotated q and k, MLP input and activation recomputed)"
                                           : "activations and scratch (norms, MLP input and activation recomputed)")
        : rotated               ? "activations and scratch (norms, rotated q and k, and MLP activation recomputed)"
        : is_rope(&t->cfg)      ? "activations and scratch (norms and MLP activation recomputed)"
        : cb->recompute_gelu    ? "activations and scratch (GELU recomputed)"
                                : "activations and scratch";
    items[n++] = MemoryItem{acts, cb->arena_bytes, 0};
    n += cb->vp ? vocab_parallel_memory_items(cb->vp, items + n) : output_workspace_items(cb, items + n);
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    items[n++] = MemoryItem{"GPU memory free now", free_b, 1};
    return n;
}

static size_t cuda_memory_in_use(Backend *be) {
    (void)be;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    return total_b - free_b;
}

static void cuda_destroy(Backend *be) {
    CudaBackend *cb = (CudaBackend *)be;
    if (!cb) return;
    if (cb->stream) CUDA_CHECK(cudaStreamSynchronize(cb->stream));
    if (cb->out) output_layer_destroy(cb->out);
    vocab_parallel_free(cb->vp);
    if (cb->adamw) adamw_plan_free(cb->adamw);
    grad_sync_free(cb->sync);
    for (int i = 0; i < 4; i++)
        if (cb->mark[i]) CUDA_CHECK(cudaEventDestroy(cb->mark[i]));
    CUDA_CHECK(cudaFree(cb->arena));
    CUDA_CHECK(cudaFree(cb->v_bf16));
    CUDA_CHECK(cudaFree(cb->m_bf16));
    CUDA_CHECK(cudaFree(cb->v));
    CUDA_CHECK(cudaFree(cb->m));
    if (cb->grads_exchanged)
        dist_free_exchanged(cb->exchange, cb->grads);
    else
        CUDA_CHECK(cudaFree(cb->grads));
    CUDA_CHECK(cudaFree(cb->master));
    if (cb->exchange)
        dist_free_exchanged(cb->exchange, cb->params);
    else
        CUDA_CHECK(cudaFree(cb->params));
    host_staging_free(cb->staging);
    matmul_free();
    if (cb->stream) CUDA_CHECK(cudaStreamDestroy(cb->stream));
    free(cb->replicated_rows);
    free(cb->layer);
    free(cb);
}

static const BackendOps cuda_ops = {
    .train_micro_step = cuda_train_micro_step,
    .eval_loss = cuda_eval_loss,
    .row_losses = cuda_row_losses,
    .logits_at = cuda_logits_at,
    .prefill = cuda_prefill,
    .decode_step = cuda_decode_step,
    .zero_grad = cuda_zero_grad,
    .reduce_grads = cuda_reduce_grads,
    .comm_wait_ms = cuda_comm_wait_ms,
    .grad_sumsq = cuda_grad_sumsq,
    .adamw_update = cuda_adamw_update,
    .read_state = cuda_read_state,
    .write_state = cuda_write_state,
    .read_grads = cuda_read_grads,
    .memory_items = cuda_memory_items,
    .memory_in_use = cuda_memory_in_use,
    .phase_ms = cuda_phase_ms,
    .destroy = cuda_destroy,
};

/* cos, sin [T, hd/2] of positions 0..T-1 from the CPU reference's functions, so both backends
 * rotate by the same angles: the global tables, and the sliding layers' own when they have a base of
 * their own. Returns 0 with a message in err when host memory runs out. */
static int upload_rope_tables(CudaBackend *cb, char *err) {
    const GPTConfig *cfg = &cb->t->cfg;
    const int T = cb->base.T, hd = cfg->head_dim, local = gpt_first_local_rope_layer(cfg);
    const size_t n = (size_t)T * (hd / 2);
    float *inv_freq = (float *)malloc((size_t)(hd / 2) * sizeof(float));
    float *cos_t = (float *)malloc(n * sizeof(float)), *sin_t = (float *)malloc(n * sizeof(float));
    int *pos = (int *)malloc((size_t)T * sizeof(int));
    const int ok = inv_freq && cos_t && sin_t && pos;
    if (ok) {
        for (int i = 0; i < T; i++) pos[i] = i;
        for (int k = 0; k < (local >= 0 ? 2 : 1); k++) {
            const RopeParams p = k == 0 ? cfg->rope : gpt_layer_rope(cfg, local);
            rope_inv_freq(inv_freq, &p, hd);
            rope_cos_sin(cos_t, sin_t, inv_freq, pos, T, hd);
            CUDA_CHECK(cudaMemcpy(k == 0 ? cb->rope_cos : cb->rope_local_cos, cos_t, n * sizeof(float),
                                  cudaMemcpyHostToDevice));
            CUDA_CHECK(cudaMemcpy(k == 0 ? cb->rope_sin : cb->rope_local_sin, sin_t, n * sizeof(float),
                                  cudaMemcpyHostToDevice));
        }
    } else {
        snprintf(err, ERR_LEN, "out of host memory for the rotary tables");
    }
    free(pos), free(sin_t), free(cos_t), free(inv_freq);
    return ok;
}

/* Dense bf16 tensor-core FLOP/s for MFU: the published peak where the device is one we know (so
 * our MFU compares with llm.c's and PyTorch's, which use the same figures), else one computed from
 * the device's own numbers, SMs × maximum clock × FLOPs per SM per clock for its compute capability
 * (Hopper 4096, Ampere/Ada 2048, counting an FMA as 2), which is above the published figure where
 * both exist (1071 against 989 TFLOP/s on the H100 SXM). *source says which. */
static double device_peak_flops(int dev, const char *name, const char **source) {
    static const struct {
        const char *model, *variant; /* both in the device name (variant NULL: any) */
        double tflops;
    } published[] = {
        {"H100", "PCIe", 756.0}, /* checked before the SXM entry: both names hold "H100" */
        {"H100", "HBM3", 989.0}, /* the SXM module reports itself as "NVIDIA H100 80GB HBM3" */
        {"H100", "SXM", 989.0},
        {"H200", NULL, 989.0},
    };
    for (size_t i = 0; i < sizeof published / sizeof published[0]; i++) {
        if (!strstr(name, published[i].model)) continue;
        if (published[i].variant && !strstr(name, published[i].variant)) continue;
        if (strstr(name, "NVL")) break; /* the NVL parts run at lower clocks: no figure here */
        *source = "published";
        return published[i].tflops * 1e12;
    }
    int sms = 0, clock_khz = 0, major = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    double per_sm_per_clock = major >= 9 ? 4096.0 : major == 8 ? 2048.0 : 1024.0;
    *source = "computed from SMs x maximum clock: no published figure for this device";
    return (double)sms * clock_khz * 1e3 * per_sm_per_clock;
}

/* Below this many rows per chunk (or all N rows) the fused layer's scaled-exponential path loses
 * to the streaming one: every chunk re-reads and re-writes dW (8 V d bytes), which at 1024 rows
 * costs about what the streaming path's extra logits GEMM costs on an H100. */
#define FUSED_MIN_CHUNK_ROWS 1024

static size_t fused_budget_for(size_t budget, size_t N, const GPTConfig *cfg) {
    const int64_t min_rows = (int64_t)N < FUSED_MIN_CHUNK_ROWS ? (int64_t)N : FUSED_MIN_CHUNK_ROWS;
    return output_layer_chunk_rows((int64_t)N, cfg->vocab_size, budget) < min_rows ? 0 : budget;
}

/* The output layer's workspace for `requested` bytes of the fused layer's chunk (0: the streaming
 * path, or the canonical layer), the chunk shrunk to what the GPU has free beside everything else
 * when the whole of it does not fit. */
static void fit_output_layer(CudaBackend *cb, size_t requested, size_t fixed, size_t free_b, size_t N,
                             const GPTConfig *cfg) {
    if (cb->vp_world) { /* the slice layer streams: its memory does not shrink */
        cb->fused_budget = 0;
        cb->out_ws_bytes = vocab_parallel_bytes(cb->base.table, cb->vp_world, (int)N, cb->base.optimizer_state);
        return;
    }
    cb->fused_budget = requested;
    cb->out_ws_bytes = output_layer_workspace_bytes(cb->base.output, (int64_t)N, cfg->vocab_size, cfg->dim, requested);
    if (!requested || fixed + cb->arena_bytes + cb->out_ws_bytes <= free_b) return;
    const size_t streaming = output_layer_workspace_bytes(OUTPUT_FUSED, (int64_t)N, cfg->vocab_size, cfg->dim, 0);
    const size_t used = fixed + cb->arena_bytes + streaming;
    size_t budget = free_b > used ? free_b - used : 0;
    if (budget > requested) budget = requested;
    cb->fused_budget = fused_budget_for(budget, N, cfg);
    cb->out_ws_bytes = output_layer_workspace_bytes(OUTPUT_FUSED, (int64_t)N, cfg->vocab_size, cfg->dim,
                                                    cb->fused_budget);
}

/* The run header's line and the memory table's label for the output layer as it runs. */
static void describe_output_layer(CudaBackend *cb, OutputKind output, size_t asked) {
    const long long rows = (long long)output_layer_fused_chunk_rows(cb->out);
    if (output == OUTPUT_CANONICAL) {
        snprintf(cb->out_ws_label, sizeof cb->out_ws_label, "output layer workspace: canonical (bf16 logits)");
        snprintf(cb->base.output_path, sizeof cb->base.output_path, "canonical, bf16 logits of all %d rows",
                 cb->base.B * cb->base.T);
    } else if (rows > 0) {
        /* the layer balances its chunks: N rows in ceil(N / rows) chunks of equal size */
        const long long N = (long long)cb->base.B * cb->base.T, chunks = ceil_div(N, rows);
        snprintf(cb->out_ws_label, sizeof cb->out_ws_label, "output layer workspace: fused, chunks of %lld rows", rows);
        snprintf(cb->base.output_path, sizeof cb->base.output_path,
                 "fused, chunked (scaled exponentials): %lld chunk%s of %lld rows (room for %lld)%s", chunks,
                 chunks > 1 ? "s" : "", (long long)ceil_div(N, chunks), rows,
                 cb->fused_budget < asked ? "; --logits-mb reduced to what the GPU has free" : "");
    } else {
        snprintf(cb->out_ws_label, sizeof cb->out_ws_label, "output layer workspace: fused, streaming");
        snprintf(cb->base.output_path, sizeof cb->base.output_path,
                 "fused, streaming (the backward recomputes the logits)%s",
                 !asked ? ", as --logits-mb 0 asks"
                        : "; --logits-mb or the free memory holds fewer than 1024 rows of scaled exponentials");
    }
}

extern "C" Backend *backend_cuda_create(const ParamTable *table, int B, int T, OutputKind output,
                                        size_t fused_budget, int recompute_gelu, OptimizerState state,
                                        unsigned long long seed, const float *init, const DataParallel *dp,
                                        char *err) {
    const Dist *dist = dp && dp->dist && dp->dist->world > 1 ? dp->dist : NULL;
    const int zero1 = dist && dp->zero1, overlap = dist && dp->overlap, bf16_wire = dist && dp->bf16_wire;
    const GPTConfig *cfg = &table->cfg;
    /* the attention's launcher checks the kernels it has for 256 (Gemma 3's head) */
    int HS = cfg->head_dim;
    if (HS != 64 && HS != 128 && HS != 256) {
        snprintf(err, ERR_LEN, "the CUDA attention needs a head size of 64, 128 or 256, this model has %d (change %s)",
                 HS, is_rope(cfg) ? "--head-dim" : "--heads");
        return NULL;
    }
    if ((long long)B * cfg->num_heads > 65535) { /* the attention kernels' grid y: said before anything is allocated */
        snprintf(err, ERR_LEN, "the CUDA attention takes at most 65535 sequences x heads a micro-batch, -b %d x %d heads is "
                 "%lld (lower -b; keep the total batch with -d)", B, cfg->num_heads, (long long)B * cfg->num_heads);
        return NULL;
    }
    if (cfg->ffn_dim % 8) {
        snprintf(err, ERR_LEN, "the CUDA backend needs --ffn-dim to be a multiple of 8 (got %d)", cfg->ffn_dim);
        return NULL;
    }
    if (cfg->dim % 64) {
        snprintf(err, ERR_LEN, "the CUDA backend needs --dim to be a multiple of 64 (got %d)", cfg->dim);
        return NULL;
    }
    const int ln_widest = cfg->norm == NORM_LAYERNORM ? layernorm_backward_max_dim() : 0;
    if (cfg->norm == NORM_LAYERNORM && cfg->dim > ln_widest) {
        snprintf(err, ERR_LEN, "the CUDA LayerNorm backward runs up to --dim %d on this GPU (its shared memory), this "
                 "model has %d (a narrower GPT-2, or a RoPE family, whose RMSNorm has no such bound)", ln_widest, cfg->dim);
        return NULL;
    }
    CudaBackend *cb = (CudaBackend *)calloc(1, sizeof *cb);
    if (cb) cb->layer = (CudaLayerActs *)calloc((size_t)cfg->num_layers, sizeof(CudaLayerActs));
    if (!cb || !cb->layer) {
        snprintf(err, ERR_LEN, "out of host memory");
        free(cb);
        return NULL;
    }
    cb->base.ops = &cuda_ops;
    cb->base.table = table;
    cb->base.B = B;
    cb->base.T = T;
    cb->base.output = output;
    cb->base.optimizer_state = state;
    cb->t = table;
    cb->base.dist = dist;
    cb->replicated = *table;
    if (dp && dp->vocab_parallel) {
        const Dist *vdist = dp->dist;
        const int world = vdist ? vdist->world : 1;
        if (!vocab_parallel_check(table, world, B * T, err)) {
            free(cb->layer);
            free(cb);
            return NULL;
        }
        cb->replicated_rows = (ParamInfo *)malloc((size_t)table->count * sizeof(ParamInfo));
        if (!cb->replicated_rows) {
            snprintf(err, ERR_LEN, "out of host memory");
            free(cb->layer);
            free(cb);
            return NULL;
        }
        cb->vp_world = world;
        cb->replicated = vocab_parallel_replicated(table, cb->replicated_rows, &cb->flat0);
        cb->t = &cb->replicated;
    }
    cb->P = cb->replicated.total;
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    snprintf(cb->base.device_name, sizeof cb->base.device_name, "%s", prop.name);
    cb->base.peak_flops = device_peak_flops(dev, prop.name, &cb->base.peak_source);

    /* Fit check before allocating anything large: fixed (parameters and optimizer state) plus
     * terms proportional to B (activations, output-layer workspace). */
    size_t N = (size_t)B * T, P = cb->P;
    const size_t asked = output == OUTPUT_FUSED ? fused_budget : 0;
    fused_budget = fused_budget_for(asked, N, cfg);
    const int most_recomputed = is_rope(cfg) ? 2 : 1;
    cb->recompute_gelu = recompute_gelu < 0 ? 0 : recompute_gelu < most_recomputed ? recompute_gelu : most_recomputed;
    cb->scratch_bytes = scratch_needed(cfg, B, T);
    cb->gated_products = gated_products_take_every_layer(cb->t);
    cb->arena_bytes = layout_arena(cb, NULL);
    /* bf16 weights and gradients whole; master and moments (fp32: 12 bytes, bf16: 4) whole or 1/world (ZeRO-1) */
    size_t state_estimate = zero1 ? P / (size_t)dist->world + 1 : P;
    const size_t state_bytes = state == OPTIMIZER_STATE_BF16 ? 2 * sizeof(kbf16) : 3 * sizeof(float);
    cb->sync_bytes = grad_sync_bytes(&cb->replicated, dist, zero1, overlap, bf16_wire, B, T);
    size_t fixed = P * (sizeof(kbf16) + sizeof(float)) + state_estimate * state_bytes + cb->sync_bytes +
                   MEMORY_RUNTIME_RESERVE;
    size_t free_b = 0, total_b = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    /* The fused layer's chunk first gives way to what is free (its speed barely changes down to
     * 1024 rows), then the activations (recomputed), then the chunk again with what that freed. */
    fit_output_layer(cb, fused_budget, fixed, free_b, N, cfg);
    const int fits = fixed + cb->arena_bytes + cb->out_ws_bytes <= free_b;
    const int chunk_lost = fused_budget > 0 && cb->fused_budget == 0 && !cb->vp_world;
    if (!fits || chunk_lost) {
        /* GPT-2 trades one elementwise pass per layer in the backward for 4·C values per token; the
         * RoPE families, whose activation is always recomputed, one RoPE pass for QK-norm's rotated
         * q, k, then their gate/up GEMM for 2F. When everything fits on the streaming path (a GEMM
         * more), a level is taken only if it brings the chunks back. */
        const int kept = cb->recompute_gelu;
        while (cb->recompute_gelu < most_recomputed) {
            cb->recompute_gelu++;
            cb->arena_bytes = layout_arena(cb, NULL);
            fit_output_layer(cb, fused_budget, fixed, free_b, N, cfg);
            if (fits ? cb->fused_budget > 0 : fixed + cb->arena_bytes + cb->out_ws_bytes <= free_b) break;
        }
        if (fits && cb->fused_budget == 0 && cb->recompute_gelu != kept) {
            cb->recompute_gelu = kept;
            cb->arena_bytes = layout_arena(cb, NULL);
            fit_output_layer(cb, fused_budget, fixed, free_b, N, cfg);
        }
    }
    const size_t per_batch = cb->arena_bytes + cb->out_ws_bytes;
    if (fixed + per_batch > free_b) {
        /* The estimate's activations are the arena's without the scratch (model/memory_estimate.h);
         * the scratch and the workspace only shrink with B, so this B's stand for the smaller ones.
         * The budget is what is free once this run's own fixed part (ZeRO-1 shards its state) is
         * taken instead of the estimate's. */
        const MemoryEstimate one = memory_estimate(table, 1, T, cb->recompute_gelu, state);
        const size_t est_fixed = memory_estimate_total(&one) - one.activations;
        const size_t room = free_b + est_fixed > fixed ? free_b + est_fixed - fixed : 0;
        const int fit = memory_estimate_largest_batch(table, T, cb->recompute_gelu, state,
                                                      round_up(cb->scratch_bytes, 256) + cb->out_ws_bytes, room);
        snprintf(err, ERR_LEN,
                 "this configuration needs about %.1f GB of GPU memory but %.1f GB are free; the largest "
                 "micro-batch that fits is -b %d (keep the total batch with -d for accumulation%s)",
                 (fixed + per_batch) / 1e9, free_b / 1e9, fit,
                 output == OUTPUT_CANONICAL ? ", or drop the logits with --output fused" : "");
        free(cb->replicated_rows);
        free(cb->layer);
        free(cb);
        return NULL;
    }
    CUDA_CHECK(cudaStreamCreate(&cb->stream));
    for (int i = 0; i < 4; i++) CUDA_CHECK(cudaEventCreate(&cb->mark[i]));
    cb->sync = grad_sync_create(&cb->replicated, dist, zero1, overlap, bf16_wire,
                                dist ? dp->bucket_bytes / sizeof(float) : 0, B, T, err);
    if (!cb->sync && err[0]) {
        cuda_destroy(&cb->base);
        return NULL;
    }
    const ShardPiece *pieces = NULL;
    int npieces = grad_sync_pieces(cb->sync, &pieces, &cb->state_elems);
    cb->padded_total = cb->sync ? grad_sync_padded_total(cb->sync) : P;
    if (!npieces) cb->state_elems = P;
    if (npieces) {
        /* where the copy engines reach them on every rank: the gather after each update */
        cb->exchange = dist;
        cb->params = (kbf16 *)dist_alloc_exchanged(dist, cb->padded_total * sizeof(kbf16),
                                                   "ZeRO-1's weights go through NCCL's kernels, not the copy engines");
    } else {
        CUDA_CHECK(cudaMalloc((void **)&cb->params, cb->padded_total * sizeof(kbf16)));
    }
    cb->grads_exchanged = grad_sync_wants_exchanged_grads(cb->sync);
    if (cb->grads_exchanged)
        cb->grads = (float *)dist_alloc_exchanged(dist, cb->padded_total * sizeof(float),
                                                  "the gradients are summed by NCCL's reduce-scatter, not the rank sum");
    else
        CUDA_CHECK(cudaMalloc((void **)&cb->grads, cb->padded_total * sizeof(float)));
    if (grad_sync_read_peers(cb->sync, cb->grads))
        snprintf(cb->base.grad_reduce_path, sizeof cb->base.grad_reduce_path,
                 "each rank sums its shard from every GPU's gradients, read over NVLink");
    if (state == OPTIMIZER_STATE_BF16) {
        CUDA_CHECK(cudaMalloc((void **)&cb->m_bf16, cb->state_elems * sizeof(kbf16)));
        CUDA_CHECK(cudaMalloc((void **)&cb->v_bf16, cb->state_elems * sizeof(kbf16)));
        CUDA_CHECK(cudaMemset(cb->m_bf16, 0, cb->state_elems * sizeof(kbf16)));
        CUDA_CHECK(cudaMemset(cb->v_bf16, 0, cb->state_elems * sizeof(kbf16)));
    } else {
        CUDA_CHECK(cudaMalloc((void **)&cb->master, cb->state_elems * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&cb->m, cb->state_elems * sizeof(float)));
        CUDA_CHECK(cudaMalloc((void **)&cb->v, cb->state_elems * sizeof(float)));
        CUDA_CHECK(cudaMemset(cb->m, 0, cb->state_elems * sizeof(float)));
        CUDA_CHECK(cudaMemset(cb->v, 0, cb->state_elems * sizeof(float)));
    }
    cb->state_grads = npieces ? grad_sync_grad_shard(cb->sync) : cb->grads;
    CUDA_CHECK(cudaMalloc(&cb->arena, cb->arena_bytes));
    layout_arena(cb, (char *)cb->arena);
    if (is_rope(cfg) && !upload_rope_tables(cb, err)) {
        cuda_destroy(&cb->base);
        return NULL;
    }
    CUDA_CHECK(cudaMemset(cb->params, 0, cb->padded_total * sizeof(kbf16)));
    CUDA_CHECK(cudaMemset(cb->grads, 0, cb->padded_total * sizeof(float)));
    if (cb->vp_world) {
        cb->vp = vocab_parallel_create(table, dp->dist, B * T, state, err);
        if (!cb->vp) {
            cuda_destroy(&cb->base);
            return NULL;
        }
        vocab_parallel_describe(cb->vp, cb->base.output_path, sizeof cb->base.output_path);
    } else {
        cb->out = output_layer_create(output, (int64_t)N, cfg->vocab_size, cfg->dim, cb->fused_budget);
        if (!cb->out) {
            snprintf(err, ERR_LEN, "cannot create the %s output layer (see the message above)",
                     output_layer_kind_name(output));
            cuda_destroy(&cb->base);
            return NULL;
        }
        describe_output_layer(cb, output, asked);
    }
    /* the AdamW plan over the flat buffers' rows; the initial weights of the whole table */
    const int rows = cb->replicated.count;
    size_t *offsets = (size_t *)malloc(rows * sizeof(size_t)), *numels = (size_t *)malloc(rows * sizeof(size_t));
    int *decay = (int *)malloc(rows * sizeof(int));
    /* seed's weights are drawn on the host (the CPU backend's bits); given ones are copied as they are */
    float *drawn = init ? NULL : (float *)malloc(table->total * sizeof(float));
    if (!offsets || !numels || !decay || (!init && !drawn)) {
        snprintf(err, ERR_LEN, "out of host memory for the initial weights (%.1f GB)", table->total * 4 / 1e9);
        free(offsets), free(numels), free(decay), free(drawn);
        cuda_destroy(&cb->base);
        return NULL;
    }
    for (int i = 0; i < rows; i++) {
        offsets[i] = cb->replicated.params[i].offset;
        numels[i] = cb->replicated.params[i].numel;
        decay[i] = cb->replicated.params[i].weight_decay;
    }
    if (npieces) {
        AdamWRange *ranges = (AdamWRange *)malloc((size_t)npieces * sizeof *ranges);
        if (!ranges) {
            fprintf(stderr, "error: out of host memory for the AdamW plan\n");
            exit(1);
        }
        for (int i = 0; i < npieces; i++) ranges[i] = AdamWRange{pieces[i].begin, pieces[i].count, pieces[i].shard_offset};
        cb->adamw = adamw_plan_create_ranges(offsets, numels, decay, rows, ranges, npieces);
        free(ranges);
    } else {
        cb->adamw = adamw_plan_create(offsets, numels, decay, rows);
    }
    /* The same init as the CPU backend (host RNG), so the two can be compared step for step. */
    if (!init) param_init(table, drawn, seed);
    cuda_write_state(&cb->base, init ? init : drawn, NULL, NULL);
    free(drawn), free(decay), free(numels), free(offsets);
    return &cb->base;
}
