/* model/cpu/backend_cpu.c - the fp32 CPU reference backend: the whole step of every family from the
 * layers in layers_cpu.c and llama_layers_cpu.c, either output layer, AdamW. One block skeleton
 * picks its operations from the config:
 *   GPT-2:       LayerNorm -> qkv -> attention -> proj -> residual -> LayerNorm -> GELU MLP -> residual
 *   Llama, Qwen: RMSNorm -> qkv [+ bias: Qwen2] -> [QK-norm: Qwen3] -> RoPE -> grouped-query attention
 *                -> o_proj -> residual -> RMSNorm -> gate/up -> SwiGLU -> down -> residual
 *   Gemma 3:     RMSNorm(1+w) -> qkv -> QK-norm(1+w) -> RoPE (the sliding layers' base, or the global
 *                one) -> attention (sliding window, or the whole causal context) -> o_proj -> RMSNorm(1+w)
 *                -> residual -> RMSNorm(1+w) -> gate/up -> GeGLU -> down -> RMSNorm(1+w) -> residual,
 *                on embeddings scaled by bf16(sqrt(C)); the tied head reads the unscaled embedding
 * The oracle for the CUDA backend and what `./train --device cpu` runs. Shapes: B, T, C, NH, NKV, hd,
 * F, L, V, Vp; N = B·T; QW = (NH + 2·NKV)·hd the packed qkv width, AW = NH·hd the attention output's,
 * FW the MLP's first projection's (F, or 2F for gated MLPs). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "kernels/adamw_bf16.h"
#include "model/backend.h"
#include "model/cpu/layers_cpu.h"
#include "model/cpu/llama_layers_cpu.h"
#include "model/cpu/output_layer_cpu.h"

/* Activations of one layer, saved by the forward for the backward. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* [N,C], [N] (LayerNorm only), [N] */
    float *qkv_proj;                  /* [N,QW] the projection's output */
    float *qk_rstd;                   /* [N,NH+NKV] QK-norm's (Qwen3 only) */
    float *qkv;                       /* [N,QW] attention's input: qkv_proj itself for GPT-2, else
                                       * after QK-norm and RoPE; the sampling cache */
    float *atty;                      /* [N,AW] attention output before the projection */
    float *att;                       /* [B,NH,T,T] softmax probabilities */
    float *attproj, *attpost_rstd;    /* [N,C] o_proj's output, [N] its norm's (sandwich norms only) */
    float *residual2;                 /* [N,C] residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch;                       /* [N,FW] */
    float *fch_gelu;                  /* [N,F] the activation's output, down projection's input */
    float *fcproj, *mlppost_rstd;     /* [N,C] down_proj's output, [N] its norm's (sandwich norms only) */
    float *residual3;                 /* [N,C] residual after the MLP: the layer's output */
} LayerActs;

/* Scratch gradients of one layer's internals (reused by every layer, zeroed before use because
 * the layer backwards add into them). */
typedef struct {
    float *dln1, *dqkv, *dqkv_rot, *dqkv_normed, *datty, *dln2, *dfch, *dfch_gelu;
    float *dproj; /* [N,C] gradient of a projection's output under its sandwich norm */
} LayerScratch;

typedef struct {
    Backend base;
    const ParamTable *t;
    float *params, *grads, *m, *v; /* each table->total floats */
    float *acts;                   /* every saved activation, one allocation */
    size_t acts_floats;
    float *encoded;                /* [N,C] */
    LayerActs *layer;              /* [L] */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *dres, *dlnf;            /* [N,C] gradient of the residual stream, of lnf */
    float *scratch;                /* backing store of LayerScratch */
    LayerScratch s;
    float *out_ws;                 /* output-layer workspace */
    float *row_losses;             /* [N] */
    float *row_objectives, *row_lses; /* [N] each */
    size_t out_ws_floats;
    float *attproj_tmp, *fcproj_tmp; /* [N,C] what each branch adds to the residual stream */
    float *rope_cos, *rope_sin;      /* [T, hd/2] of positions 0..T-1 (RoPE only) */
    float *rope_local_cos, *rope_local_sin; /* the same for the sliding layers' base (when it has one) */
} CpuBackend;

static int is_rope(const GPTConfig *cfg) {
    return cfg->positions == POS_ROPE;
}

/* The one place that lays out the activations: called with base = NULL to count, then to assign. */
static size_t layout_acts(CpuBackend *cb, float *base) {
    const GPTConfig *cfg = &cb->t->cfg;
    const BlockWidths w = gpt_block_widths(cfg);
    size_t B = cb->base.B, T = cb->base.T, C = w.C, NH = cfg->num_heads, N = B * T;
    const int layernorm = cfg->norm == NORM_LAYERNORM, rope = is_rope(cfg);
    size_t off = 0;
#define TAKE(ptr, n)                              \
    do {                                          \
        if (base) (ptr) = base + off;             \
        off += (n);                               \
    } while (0)
    TAKE(cb->encoded, N * C);
    for (int l = 0; l < cfg->num_layers; l++) {
        LayerActs *a = &cb->layer[l];
        TAKE(a->ln1, N * C);
        if (layernorm) TAKE(a->ln1_mean, N);
        TAKE(a->ln1_rstd, N);
        TAKE(a->qkv_proj, N * w.QW);
        if (cfg->qk_norm) TAKE(a->qk_rstd, N * (size_t)(cfg->num_heads + cfg->num_kv_heads));
        if (rope)
            TAKE(a->qkv, N * w.QW);
        else
            a->qkv = a->qkv_proj;
        TAKE(a->atty, N * w.AW);
        TAKE(a->att, B * NH * T * T);
        if (cfg->sandwich_norm) {
            TAKE(a->attproj, N * C);
            TAKE(a->attpost_rstd, N);
            TAKE(a->fcproj, N * C);
            TAKE(a->mlppost_rstd, N);
        }
        TAKE(a->residual2, N * C);
        TAKE(a->ln2, N * C);
        if (layernorm) TAKE(a->ln2_mean, N);
        TAKE(a->ln2_rstd, N);
        TAKE(a->fch, N * w.FW);
        TAKE(a->fch_gelu, N * w.F);
        TAKE(a->residual3, N * C);
    }
    TAKE(cb->lnf, N * C);
    if (layernorm) TAKE(cb->lnf_mean, N);
    TAKE(cb->lnf_rstd, N);
    TAKE(cb->dres, N * C);
    TAKE(cb->dlnf, N * C);
    TAKE(cb->attproj_tmp, N * C);
    TAKE(cb->fcproj_tmp, N * C);
    TAKE(cb->s.dln1, N * C);
    TAKE(cb->s.dqkv, N * w.QW);
    if (rope) TAKE(cb->s.dqkv_rot, N * w.QW);
    if (cfg->qk_norm) TAKE(cb->s.dqkv_normed, N * w.QW);
    TAKE(cb->s.datty, N * w.AW);
    TAKE(cb->s.dln2, N * C);
    TAKE(cb->s.dfch, N * w.FW);
    TAKE(cb->s.dfch_gelu, N * w.F);
    if (cfg->sandwich_norm) TAKE(cb->s.dproj, N * C);
    if (rope) {
        TAKE(cb->rope_cos, T * (size_t)cfg->head_dim / 2);
        TAKE(cb->rope_sin, T * (size_t)cfg->head_dim / 2);
    }
    if (gpt_first_local_rope_layer(cfg) >= 0) {
        TAKE(cb->rope_local_cos, T * (size_t)cfg->head_dim / 2);
        TAKE(cb->rope_local_sin, T * (size_t)cfg->head_dim / 2);
    }
#undef TAKE
    return off;
}

/* The block's norm (LayerNorm or RMSNorm, as the config says) over N rows; mean is unused by
 * RMSNorm, bias is LayerNorm's. */
static void norm_forward(const GPTConfig *cfg, float *out, float *mean, float *rstd, const float *inp,
                         const float *weight, const float *bias, int N) {
    if (cfg->norm == NORM_LAYERNORM)
        layernorm_forward_cpu(out, mean, rstd, inp, weight, bias, 1, N, cfg->dim);
    else
        rmsnorm_forward_cpu(out, rstd, inp, weight, (size_t)N, cfg->dim, cfg->norm_eps,
                            cfg->norm == NORM_RMSNORM_ONE_PLUS_W);
}

static void norm_backward(const GPTConfig *cfg, float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, const float *mean, const float *rstd, int N) {
    if (cfg->norm == NORM_LAYERNORM)
        layernorm_backward_cpu(dinp, dweight, dbias, dout, inp, weight, mean, rstd, 1, N, cfg->dim);
    else
        rmsnorm_backward_cpu(dinp, dweight, dout, inp, weight, rstd, (size_t)N, cfg->dim,
                             cfg->norm == NORM_RMSNORM_ONE_PLUS_W);
}

/* The gradient of a branch's output projection, proj: the residual stream's (dres), or under a
 * sandwich norm (weight w, its gradient dw, proj's 1/rms) what that norm's backward makes of it. */
static const float *branch_output_grad(CpuBackend *cb, float *dw, const float *w, const float *proj,
                                       const float *rstd, int N) {
    const GPTConfig *cfg = &cb->t->cfg;
    if (!cfg->sandwich_norm) return cb->dres;
    memset(cb->s.dproj, 0, (size_t)N * cfg->dim * sizeof(float));
    norm_backward(cfg, cb->s.dproj, dw, NULL, cb->dres, proj, w, NULL, rstd, N);
    return cb->s.dproj;
}

/* Layer l's attention over B sequences of T: its window (sliding layers) and the family's scale. */
static AttentionParams gqa_params(const GPTConfig *cfg, int l, int B, int T, const int *pos) {
    AttentionParams p = {.qkv = {B, T, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim, pos},
                         .scale = gpt_attention_scale(cfg),
                         .window = gpt_layer_is_sliding(cfg, l) ? cfg->sliding_window : 0};
    return p;
}

/* Layer l's rotation tables [T, hd/2]: the sliding layers' own, or the global ones. */
static void layer_rope(const CpuBackend *cb, int l, const float **cos_t, const float **sin_t) {
    const int local = cb->rope_local_cos && gpt_layer_is_sliding(&cb->t->cfg, l);
    *cos_t = local ? cb->rope_local_cos : cb->rope_cos;
    *sin_t = local ? cb->rope_local_sin : cb->rope_sin;
}

static GluActivation glu_of(const GPTConfig *cfg) {
    return cfg->mlp == MLP_GEGLU ? GLU_GELU_TANH : GLU_SILU;
}

/* The body's forward over the activation rows [t0, t0 + B·T): with t0 = 0, B sequences of T
 * tokens (a micro-batch, or a prompt with B = 1; pos: their positions, backend.h, or NULL); with
 * t0 > 0, one token (B = T = 1; pos NULL) at position
 * t0 of sequence 0, whose attention reads the keys and values that rows 0..t0-1 of each layer's
 * qkv still hold (the sampling cache). inputs: the tokens of those rows. Every other layer works
 * row by row, so a row computed alone equals the same row of a whole forward. */
static void forward_body(CpuBackend *cb, const int *inputs, const int *pos, int t0, int B, int T) {
    const ParamTable *t = cb->t;
    const GPTConfig *cfg = &t->cfg;
    const BlockWidths w = gpt_block_widths(cfg);
    int C = cfg->dim, NH = cfg->num_heads, N = B * T;
    const size_t r = (size_t)t0; /* the first row */
    const float *wte = whole_tensor(t, cb->params, ROLE_WTE);
    if (is_rope(cfg)) {
        embedding_forward_cpu(cb->encoded + r * C, inputs, wte, gpt_embed_scale(cfg), (size_t)N, C);
    } else {
        encoder_forward_cpu(cb->encoded + r * C, inputs, pos, wte, whole_tensor(t, cb->params, ROLE_WPE) + r * C, B, T,
                            C);
    }
    const float *residual = cb->encoded;
    /* RoPE's rows: row n of the B·T is position t0 + n % T, or pos[n] */
    const size_t half = (size_t)cfg->head_dim / 2;
    QkvLayout rows = {B, T, NH, cfg->num_kv_heads, cfg->head_dim, pos};
    for (int l = 0; l < cfg->num_layers; l++) {
        LayerTensors p = layer_tensors(t, cb->params, l);
        LayerActs *a = &cb->layer[l];
        norm_forward(cfg, a->ln1 + r * C, a->ln1_mean ? a->ln1_mean + r : NULL, a->ln1_rstd + r, residual + r * C,
                     p.ln1w, p.ln1b, N);
        matmul_forward_cpu(a->qkv_proj + r * w.QW, a->ln1 + r * C, p.qkvw, p.qkvb, N, C, (int)w.QW);
        if (is_rope(cfg)) {
            const float *src = a->qkv_proj + r * w.QW;
            if (cfg->qk_norm) {
                qk_norm_forward_cpu(a->qkv + r * w.QW, a->qk_rstd + r * (size_t)(NH + cfg->num_kv_heads), src,
                                    p.qnormw, p.knormw, &rows, cfg->norm_eps, cfg->norm == NORM_RMSNORM_ONE_PLUS_W);
                src = a->qkv + r * w.QW;
            }
            const float *cos_t, *sin_t;
            layer_rope(cb, l, &cos_t, &sin_t);
            rope_forward_cpu(a->qkv + r * w.QW, src, cos_t + r * half, sin_t + r * half, &rows);
            /* decoding: row t0 attends to rows 0..t0 of the sequence, recomputed as one sequence
             * of t0 + 1 (each row alone, so rows 0..t0-1 come out as they were) */
            AttentionParams ap = gqa_params(cfg, l, t0 == 0 ? B : 1, t0 == 0 ? T : t0 + 1, pos);
            gqa_attention_forward_cpu(a->atty, a->att, a->qkv, &ap);
        } else if (t0 == 0) {
            attention_forward_cpu(a->atty, a->att, a->qkv, pos, B, T, C, NH);
        } else {
            attention_decode_cpu(a->atty + r * C, a->att, a->qkv, t0, C, NH);
        }
        /* with sandwich norms the projection's output is kept for its norm's backward, and the norm's
         * output is what the residual stream adds */
        float *attproj = cfg->sandwich_norm ? a->attproj : cb->attproj_tmp;
        matmul_forward_cpu(attproj + r * C, a->atty + r * w.AW, p.attprojw, p.attprojb, N, (int)w.AW, C);
        if (cfg->sandwich_norm)
            norm_forward(cfg, cb->attproj_tmp + r * C, NULL, a->attpost_rstd + r, attproj + r * C, p.attpostw, NULL, N);
        residual_forward_cpu(a->residual2 + r * C, residual + r * C, cb->attproj_tmp + r * C, (size_t)N * C);
        norm_forward(cfg, a->ln2 + r * C, a->ln2_mean ? a->ln2_mean + r : NULL, a->ln2_rstd + r,
                     a->residual2 + r * C, p.ln2w, p.ln2b, N);
        matmul_forward_cpu(a->fch + r * w.FW, a->ln2 + r * C, p.fcw, p.fcb, N, C, (int)w.FW);
        if (cfg->mlp == MLP_GELU)
            gelu_forward_cpu(a->fch_gelu + r * w.F, a->fch + r * w.F, (size_t)N * w.F);
        else
            glu_forward_cpu(a->fch_gelu + r * w.F, a->fch + r * w.FW, (size_t)N, (int)w.F, glu_of(cfg));
        float *fcproj = cfg->sandwich_norm ? a->fcproj : cb->fcproj_tmp;
        matmul_forward_cpu(fcproj + r * C, a->fch_gelu + r * w.F, p.fcprojw, p.fcprojb, N, (int)w.F, C);
        if (cfg->sandwich_norm)
            norm_forward(cfg, cb->fcproj_tmp + r * C, NULL, a->mlppost_rstd + r, fcproj + r * C, p.mlppostw, NULL, N);
        residual_forward_cpu(a->residual3 + r * C, a->residual2 + r * C, cb->fcproj_tmp + r * C, (size_t)N * C);
        residual = a->residual3;
    }
    norm_forward(cfg, cb->lnf + r * C, cb->lnf_mean ? cb->lnf_mean + r : NULL, cb->lnf_rstd + r, residual + r * C,
                 whole_tensor(t, cb->params, ROLE_LNF_W), whole_tensor(t, cb->params, ROLE_LNF_B), N);
}

/* Runs the selected output layer on lnf; returns the sum of valid losses. */
static double output_layer(CpuBackend *cb, const int *targets, float grad_scale, int with_grads) {
    const GPTConfig *cfg = &cb->t->cfg;
    OutputLayerCpu a = {
        .H = cb->lnf,
        .W = whole_tensor(cb->t, cb->params, head_role(cfg)),
        .targets = targets,
        .N = cb->base.B * cb->base.T,
        .C = cfg->dim,
        .V = cfg->vocab_size,
        .grad_scale = grad_scale,
        .dH = with_grads ? cb->dlnf : NULL,
        .dW = with_grads ? whole_tensor(cb->t, cb->grads, head_role(cfg)) : NULL,
        .losses = cb->row_losses,
        .opt = backend_loss_options(&cb->base),
        .objectives = cb->row_objectives,
        .lses = cb->row_lses,
    };
    const double sum = cb->base.output != OUTPUT_FUSED ? output_layer_canonical_cpu(&a, cb->out_ws)
                                                       : output_layer_fused_cpu(&a, cb->out_ws);
    /* the objective and lse means, summed in row order as the loss is (ignored rows hold 0) */
    const int valid = output_layer_count_valid(targets, a.N);
    double obj = 0.0, lse = 0.0;
    for (int n = 0; n < a.N; n++) obj += cb->row_objectives[n], lse += cb->row_lses[n];
    cb->base.last_objective = valid ? (float)(obj / valid) : 0.0f;
    cb->base.last_mean_lse = valid ? (float)(lse / valid) : 0.0f;
    return sum;
}

static float cpu_eval_loss(Backend *be, const int *inputs, const int *targets, const int *positions) {
    CpuBackend *cb = (CpuBackend *)be;
    forward_body(cb, inputs, positions, 0, be->B, be->T);
    int valid = output_layer_count_valid(targets, be->B * be->T);
    double sum = output_layer(cb, targets, 0.0f, 0);
    return valid ? (float)(sum / valid) : 0.0f;
}

static void cpu_row_losses(Backend *be, float *out) {
    memcpy(out, ((CpuBackend *)be)->row_losses, (size_t)be->B * be->T * sizeof(float));
}

static float cpu_train_micro_step(Backend *be, const int *inputs, const int *targets, const int *positions,
                                  float loss_scale, int last_micro) {
    (void)last_micro; /* alone: nothing to reduce */
    CpuBackend *cb = (CpuBackend *)be;
    const ParamTable *t = cb->t;
    const GPTConfig *cfg = &t->cfg;
    const BlockWidths w = gpt_block_widths(cfg);
    int B = be->B, T = be->T, C = cfg->dim, NH = cfg->num_heads, N = B * T;
    size_t NC = (size_t)N * C;

    forward_body(cb, inputs, positions, 0, B, T);
    int valid = output_layer_count_valid(targets, N);
    memset(cb->dlnf, 0, NC * sizeof(float));
    double sum = output_layer(cb, targets, valid ? loss_scale / valid : 0.0f, 1);

    const float *last = cfg->num_layers ? cb->layer[cfg->num_layers - 1].residual3 : cb->encoded;
    memset(cb->dres, 0, NC * sizeof(float));
    norm_backward(cfg, cb->dres, whole_tensor(t, cb->grads, ROLE_LNF_W), whole_tensor(t, cb->grads, ROLE_LNF_B),
                  cb->dlnf, last, whole_tensor(t, cb->params, ROLE_LNF_W), cb->lnf_mean, cb->lnf_rstd, N);
    const QkvLayout rows = {B, T, NH, cfg->num_kv_heads, cfg->head_dim, positions};
    /* dres holds the gradient of the residual stream; walking down a layer, each branch's norm
     * backward adds its contribution into it (residual adds pass gradients through). */
    for (int l = cfg->num_layers - 1; l >= 0; l--) {
        LayerTensors p = layer_tensors(t, cb->params, l), g = layer_tensors(t, cb->grads, l);
        LayerActs *a = &cb->layer[l];
        const float *residual = l == 0 ? cb->encoded : cb->layer[l - 1].residual3;
        LayerScratch *s = &cb->s;
        memset(s->dfch_gelu, 0, N * w.F * sizeof(float));
        memset(s->dfch, 0, N * w.FW * sizeof(float));
        memset(s->dln2, 0, NC * sizeof(float));
        memset(s->datty, 0, N * w.AW * sizeof(float));
        memset(s->dqkv, 0, N * w.QW * sizeof(float));
        memset(s->dln1, 0, NC * sizeof(float));
        const float *dfcproj = branch_output_grad(cb, g.mlppostw, p.mlppostw, a->fcproj, a->mlppost_rstd, N);
        matmul_backward_cpu(s->dfch_gelu, g.fcprojw, g.fcprojb, dfcproj, a->fch_gelu, p.fcprojw, N, (int)w.F, C);
        if (cfg->mlp == MLP_GELU)
            gelu_backward_cpu(s->dfch, a->fch, s->dfch_gelu, N * w.F);
        else
            glu_backward_cpu(s->dfch, s->dfch_gelu, a->fch, (size_t)N, (int)w.F, glu_of(cfg));
        matmul_backward_cpu(s->dln2, g.fcw, g.fcb, s->dfch, a->ln2, p.fcw, N, C, (int)w.FW);
        norm_backward(cfg, cb->dres, g.ln2w, g.ln2b, s->dln2, a->residual2, p.ln2w, a->ln2_mean, a->ln2_rstd, N);
        const float *dattproj = branch_output_grad(cb, g.attpostw, p.attpostw, a->attproj, a->attpost_rstd, N);
        matmul_backward_cpu(s->datty, g.attprojw, g.attprojb, dattproj, a->atty, p.attprojw, N, (int)w.AW, C);
        /* dqkv: the gradient of qkv_proj, the projection's output */
        if (is_rope(cfg)) {
            const AttentionParams ap = gqa_params(cfg, l, B, T, positions);
            const float *cos_t, *sin_t;
            layer_rope(cb, l, &cos_t, &sin_t);
            memset(s->dqkv_rot, 0, N * w.QW * sizeof(float));
            gqa_attention_backward_cpu(s->dqkv_rot, s->datty, a->qkv, a->att, &ap);
            float *drot_in = s->dqkv; /* RoPE's input: qkv_proj, or QK-norm's output */
            if (cfg->qk_norm) {
                memset(s->dqkv_normed, 0, N * w.QW * sizeof(float));
                drot_in = s->dqkv_normed;
            }
            rope_backward_cpu(drot_in, s->dqkv_rot, cos_t, sin_t, &rows);
            if (cfg->qk_norm)
                qk_norm_backward_cpu(s->dqkv, g.qnormw, g.knormw, s->dqkv_normed, a->qkv_proj, p.qnormw, p.knormw,
                                     a->qk_rstd, &rows, cfg->norm == NORM_RMSNORM_ONE_PLUS_W);
        } else {
            attention_backward_cpu(s->dqkv, s->datty, a->qkv, a->att, positions, B, T, C, NH);
        }
        matmul_backward_cpu(s->dln1, g.qkvw, g.qkvb, s->dqkv, a->ln1, p.qkvw, N, C, (int)w.QW);
        norm_backward(cfg, cb->dres, g.ln1w, g.ln1b, s->dln1, residual, p.ln1w, a->ln1_mean, a->ln1_rstd, N);
    }
    float *dwte = whole_tensor(t, cb->grads, ROLE_WTE);
    if (is_rope(cfg)) {
        embedding_backward_cpu(dwte, cb->dres, inputs, gpt_embed_scale(cfg), gpt_embed_pad_token(cfg), (size_t)N, C);
    } else {
        encoder_backward_cpu(dwte, whole_tensor(t, cb->grads, ROLE_WPE), cb->dres, inputs, positions, B, T, C);
    }
    return valid ? (float)(sum / valid) : 0.0f;
}

/* The full-vocabulary logits of activation row `row` (lnf after a forward). */
static void logits_of_row(CpuBackend *cb, int row, float *logits) {
    const GPTConfig *cfg = &cb->t->cfg;
    matmul_forward_cpu(logits, cb->lnf + (size_t)row * cfg->dim, whole_tensor(cb->t, cb->params, head_role(cfg)), NULL,
                       1, cfg->dim, cfg->vocab_size);
    gpt_cap_logits(cfg, logits, cfg->vocab_size);
}

static void cpu_logits_at(Backend *be, const int *tokens, int pos, float *logits) {
    CpuBackend *cb = (CpuBackend *)be;
    forward_body(cb, tokens, NULL, 0, be->B, be->T);
    logits_of_row(cb, pos, logits);
}

static void cpu_prefill(Backend *be, const int *tokens, int n, float *logits) {
    CpuBackend *cb = (CpuBackend *)be;
    forward_body(cb, tokens, NULL, 0, 1, n);
    logits_of_row(cb, n - 1, logits);
}

static void cpu_decode_step(Backend *be, int token, int pos, float *logits) {
    CpuBackend *cb = (CpuBackend *)be;
    forward_body(cb, &token, NULL, pos, 1, 1);
    logits_of_row(cb, pos, logits);
}

static void cpu_zero_grad(Backend *be) {
    CpuBackend *cb = (CpuBackend *)be;
    memset(cb->grads, 0, cb->t->total * sizeof(float));
}

static void cpu_reduce_grads(Backend *be) {
    (void)be; /* the CPU backend trains alone */
}

static double cpu_comm_wait_ms(Backend *be) {
    (void)be;
    return 0.0;
}

static double cpu_grad_sumsq(Backend *be) {
    CpuBackend *cb = (CpuBackend *)be;
    double s = 0.0;
    for (size_t i = 0; i < cb->t->total; i++) s += (double)cb->grads[i] * cb->grads[i];
    return s;
}

/* Under OPTIMIZER_STATE_BF16 the weights, m and v hold bf16 values: the update of one value is the
 * CUDA kernel's, to the bit (kernels/adamw_bf16.h). */
static void cpu_adamw_update_bf16(CpuBackend *cb, const AdamWStep *s, float c1, float c2) {
    for (int i = 0; i < cb->t->count; i++) {
        const ParamInfo *pi = &cb->t->params[i];
        const AdamWBf16Step st = {s->lr, s->beta1, s->beta2, s->eps, pi->weight_decay ? s->weight_decay : 0.0f,
                                  s->grad_scale, c1, c2, s->step};
        for (size_t j = 0; j < pi->numel; j++) {
            const size_t k = pi->offset + j;
            uint16_t w = bf16_bits_nearest(cb->params[k]), m = bf16_bits_nearest(cb->m[k]);
            uint16_t v = bf16_bits_nearest(cb->v[k]);
            adamw_bf16_value(&st, k, cb->grads[k], &w, &m, &v);
            cb->params[k] = bf16_bits_to_float(w);
            cb->m[k] = bf16_bits_to_float(m);
            cb->v[k] = bf16_bits_to_float(v);
        }
    }
}

/* Rounds n values to bf16 in place (to nearest): how values enter bf16 state. */
static void round_to_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_bits_to_float(bf16_bits_nearest(x[i]));
}

static void cpu_adamw_update(Backend *be, const AdamWStep *s) {
    CpuBackend *cb = (CpuBackend *)be;
    float c1 = 1.0f - powf(s->beta1, (float)s->step), c2 = 1.0f - powf(s->beta2, (float)s->step);
    if (be->optimizer_state == OPTIMIZER_STATE_BF16) {
        cpu_adamw_update_bf16(cb, s, c1, c2);
        return;
    }
    for (int i = 0; i < cb->t->count; i++) {
        const ParamInfo *pi = &cb->t->params[i];
        float wd = pi->weight_decay ? s->weight_decay : 0.0f;
        float *p = cb->params + pi->offset, *g = cb->grads + pi->offset;
        float *m = cb->m + pi->offset, *v = cb->v + pi->offset;
        for (size_t j = 0; j < pi->numel; j++) {
            float grad = g[j] * s->grad_scale;
            m[j] = s->beta1 * m[j] + (1.0f - s->beta1) * grad;
            v[j] = s->beta2 * v[j] + (1.0f - s->beta2) * grad * grad;
            float mhat = m[j] / c1, vhat = v[j] / c2;
            p[j] -= s->lr * (mhat / (sqrtf(vhat) + s->eps) + wd * p[j]);
        }
    }
}

static void cpu_read_state(Backend *be, float *params, float *m, float *v) {
    CpuBackend *cb = (CpuBackend *)be;
    size_t n = cb->t->total * sizeof(float);
    if (params) memcpy(params, cb->params, n);
    if (m) memcpy(m, cb->m, n);
    if (v) memcpy(v, cb->v, n);
}

static void cpu_write_state(Backend *be, const float *params, const float *m, const float *v) {
    CpuBackend *cb = (CpuBackend *)be;
    size_t n = cb->t->total * sizeof(float);
    if (params) memcpy(cb->params, params, n);
    if (m) memcpy(cb->m, m, n);
    if (v) memcpy(cb->v, v, n);
    if (be->optimizer_state == OPTIMIZER_STATE_BF16) {
        if (params) round_to_bf16(cb->params, cb->t->total);
        if (m) round_to_bf16(cb->m, cb->t->total);
        if (v) round_to_bf16(cb->v, cb->t->total);
    }
}

static void cpu_read_grads(Backend *be, float *grads) {
    CpuBackend *cb = (CpuBackend *)be;
    memcpy(grads, cb->grads, cb->t->total * sizeof(float));
}

static int cpu_memory_items(Backend *be, MemoryItem *items) {
    CpuBackend *cb = (CpuBackend *)be;
    size_t p = cb->t->total * sizeof(float);
    int n = 0;
    int N = be->B * be->T, V = cb->t->cfg.vocab_size;
    const int bf16 = be->optimizer_state == OPTIMIZER_STATE_BF16;
    items[n++] = (MemoryItem){bf16 ? "parameters (fp32 holding bf16 values)" : "parameters (fp32)", p, 0};
    items[n++] = (MemoryItem){"gradients (fp32)", p, 0};
    items[n++] = (MemoryItem){bf16 ? "AdamW m, v (fp32 holding bf16 values)" : "AdamW m, v (fp32)", 2 * p, 0};
    items[n++] = (MemoryItem){"activations", cb->acts_floats * sizeof(float), 0};
    items[n++] = (MemoryItem){"output layer workspace: fused", output_layer_fused_cpu_workspace(N) * sizeof(float),
                              be->output != OUTPUT_FUSED};
    items[n++] = (MemoryItem){"output layer workspace: canonical",
                              output_layer_canonical_cpu_workspace(N, V) * sizeof(float),
                              be->output == OUTPUT_FUSED};
    return n;
}

static size_t cpu_memory_in_use(Backend *be) {
    (void)be;
    return 0;
}

static void cpu_destroy(Backend *be) {
    CpuBackend *cb = (CpuBackend *)be;
    if (!cb) return;
    free(cb->row_lses);
    free(cb->row_objectives);
    free(cb->row_losses);
    free(cb->out_ws);
    free(cb->acts);
    free(cb->layer);
    free(cb->v);
    free(cb->m);
    free(cb->grads);
    free(cb->params);
    free(cb);
}

static const BackendOps cpu_ops = {
    .train_micro_step = cpu_train_micro_step,
    .eval_loss = cpu_eval_loss,
    .row_losses = cpu_row_losses,
    .logits_at = cpu_logits_at,
    .prefill = cpu_prefill,
    .decode_step = cpu_decode_step,
    .zero_grad = cpu_zero_grad,
    .reduce_grads = cpu_reduce_grads,
    .comm_wait_ms = cpu_comm_wait_ms,
    .grad_sumsq = cpu_grad_sumsq,
    .adamw_update = cpu_adamw_update,
    .read_state = cpu_read_state,
    .write_state = cpu_write_state,
    .read_grads = cpu_read_grads,
    .memory_items = cpu_memory_items,
    .memory_in_use = cpu_memory_in_use,
    .destroy = cpu_destroy,
};

static size_t output_workspace_floats(OutputKind output, int N, int V) {
    return output != OUTPUT_FUSED ? output_layer_canonical_cpu_workspace(N, V) : output_layer_fused_cpu_workspace(N);
}

double backend_cpu_bytes(const ParamTable *table, int B, int T, OutputKind output, int training) {
    CpuBackend probe = {.base = {.B = B, .T = T}, .t = table};
    probe.layer = calloc((size_t)table->cfg.num_layers, sizeof(LayerActs)); /* layout_acts points into it */
    if (!probe.layer) return 0.0;
    const size_t acts = layout_acts(&probe, NULL);
    free(probe.layer);
    const int N = B * T;
    /* the forward alone never touches the gradients and AdamW's moments, so their pages stay unmapped */
    const size_t weights = (training ? 4 : 1) * table->total;
    return (double)(weights + acts + output_workspace_floats(output, N, table->cfg.vocab_size) + 3 * (size_t)N) *
           sizeof(float);
}

Backend *backend_cpu_create(const ParamTable *table, int B, int T, OutputKind output, OptimizerState state,
                            unsigned long long seed, const float *init, char *err) {
    CpuBackend *cb = calloc(1, sizeof *cb);
    if (!cb) {
        snprintf(err, ERR_LEN, "out of host memory for the CPU backend");
        return NULL;
    }
    cb->base = (Backend){.ops = &cpu_ops, .table = table, .B = B, .T = T, .output = output,
                         .optimizer_state = state, .device_name = "cpu"};
    cb->t = table;
    size_t P = table->total;
    int N = B * T, V = table->cfg.vocab_size;
    cb->layer = calloc((size_t)table->cfg.num_layers, sizeof(LayerActs));
    if (!cb->layer) goto oom;
    cb->acts_floats = layout_acts(cb, NULL);
    cb->out_ws_floats = output_workspace_floats(output, N, V);
    cb->params = calloc(P, sizeof(float));
    cb->grads = calloc(P, sizeof(float));
    cb->m = calloc(P, sizeof(float));
    cb->v = calloc(P, sizeof(float));
    if (!cb->params || !cb->grads || !cb->m || !cb->v) goto oom;
    cb->acts = calloc(cb->acts_floats, sizeof(float));
    cb->out_ws = calloc(cb->out_ws_floats, sizeof(float));
    cb->row_losses = calloc((size_t)N, sizeof(float));
    cb->row_objectives = calloc((size_t)N, sizeof(float));
    cb->row_lses = calloc((size_t)N, sizeof(float));
    if (!cb->acts || !cb->out_ws || !cb->row_losses || !cb->row_objectives || !cb->row_lses) goto oom;
    layout_acts(cb, cb->acts);
    if (is_rope(&table->cfg)) {
        /* positions 0..T-1: every sequence of a micro-batch, and any row the sampler decodes */
        int hd = table->cfg.head_dim;
        float *inv_freq = malloc((size_t)hd / 2 * sizeof(float));
        int *pos = malloc((size_t)T * sizeof(int));
        if (!inv_freq || !pos) {
            free(pos);
            free(inv_freq);
            goto oom;
        }
        for (int i = 0; i < T; i++) pos[i] = i;
        rope_inv_freq(inv_freq, &table->cfg.rope, hd);
        rope_cos_sin(cb->rope_cos, cb->rope_sin, inv_freq, pos, T, hd);
        if (cb->rope_local_cos) {
            const RopeParams local = gpt_layer_rope(&table->cfg, gpt_first_local_rope_layer(&table->cfg));
            rope_inv_freq(inv_freq, &local, hd);
            rope_cos_sin(cb->rope_local_cos, cb->rope_local_sin, inv_freq, pos, T, hd);
        }
        free(pos);
        free(inv_freq);
    }
    if (init) memcpy(cb->params, init, P * sizeof(float));
    else param_init(table, cb->params, seed);
    if (state == OPTIMIZER_STATE_BF16) round_to_bf16(cb->params, P); /* the GPU's bf16 weights, with no master */
    return &cb->base;
oom:
    snprintf(err, ERR_LEN, "out of host memory for the CPU backend (needs about %.1f GB; lower -b or -t, or the model: -e, -v, --max-seq-len)",
             backend_cpu_bytes(table, B, T, output, 1) / 1e9);
    cpu_destroy(&cb->base);
    return NULL;
}
