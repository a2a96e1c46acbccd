/* model/cpu/llama_layers_cpu.h - the fp32 CPU reference of the layers that Llama 3, Qwen2/Qwen3 and
 * Gemma 3 add to GPT-2's (model/cpu/layers_cpu.h): RMSNorm, rotary position embeddings, gated MLPs
 * (SwiGLU, GeGLU), grouped-query causal attention with an optional sliding window, and QK-norm.
 * Semantics follow Hugging Face transformers (modeling_llama.py, modeling_qwen3.py,
 * modeling_gemma3.py, modeling_rope_utils.py).
 *
 * Shapes: B batch, T time, N = B·T tokens, C = d model width, NH query heads, NKV key/value heads
 * (NH % NKV == 0), hd head_dim (its own number: Qwen3-0.6B has d 1024 and 16 heads of 128),
 * F ffn width.
 * The packed qkv row of one token is (NH + 2·NKV)·hd wide: the NH query heads, then the NKV key
 * heads, then the NKV value heads, each head hd contiguous values. It is HF's q_proj, k_proj and
 * v_proj weights stacked row-wise ([out, in] as HF stores them), so one matmul_forward_cpu gives it;
 * Qwen2's q, k and v biases stacked the same way are that matmul's bias.
 * Query head h reads key/value head h / (NH / NKV), as transformers' repeat_kv: consecutive query
 * heads form a group that shares one K and one V, which are never copied.
 * Convention (as layers_cpu.h): forward functions overwrite their outputs; backward functions ADD
 * (+=) into every gradient they produce, parameters and inputs alike. No output aliases an input
 * unless a function says so. */
#ifndef FUSEDGPT_LLAMA_LAYERS_CPU_H
#define FUSEDGPT_LLAMA_LAYERS_CPU_H

#include <stddef.h>

#include "model/gpt.h" /* RopeParams */

/* The heads of the packed qkv rows. */
typedef struct {
    int B, T;    /* the rows are the N = B·T tokens, batch-major */
    int NH, NKV; /* query heads; key/value heads */
    int hd;      /* head_dim */
    /* [N]: each row's position in its document, the rows of a sequence being one or more documents
     * packed end to end (0 at each document's first row). RoPE rotates by it, and a query sees only
     * the keys of its own document: from row t − pos[t] on. NULL: every sequence is one document,
     * row t at position t. */
    const int *pos;
} QkvLayout;

/* Row n's position in its document (QkvLayout's pos). */
static inline int qkv_row_position(const QkvLayout *s, size_t n) {
    return s->pos ? s->pos[n] : (int)(n % (size_t)s->T);
}

/* Width of one token's packed qkv row: (NH + 2·NKV)·hd. */
static inline size_t qkv_row_width(const QkvLayout *s) {
    return (size_t)(s->NH + 2 * s->NKV) * s->hd;
}

/* ---- The token embedding alone, scaled (Gemma: bf16(sqrt(C)); 1 elsewhere) ----
 * out [N,C] = wte[inp[n]]·scale. The backward adds dwte[inp[n]] += dout[n]·scale for every row whose
 * token is not pad (nn.Embedding's padding_idx: no gradient through its lookups; pad < 0: none). */
void embedding_forward_cpu(float *out, const int *inp, const float *wte, float scale, size_t N, int C);
void embedding_backward_cpu(float *dwte, const float *dout, const int *inp, float scale, int pad, size_t N, int C);

/* ---- RMSNorm: out = x / sqrt(mean(x²) + eps) · g over each row of C, in fp32 ----
 * g = w (Llama, Qwen) or 1 + w (Gemma, one_plus_w = 1: its weights are stored as offsets from 1).
 * rstd [N]: 1 / sqrt(mean(x²) + eps) of each row, kept for the backward. */
void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, size_t N, int C, float eps,
                         int one_plus_w);
void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, size_t N, int C, int one_plus_w);

/* ---- QK-norm (Qwen3, Gemma 3): RMSNorm over head_dim of every query head with q_norm [hd] and of
 * every key head with k_norm [hd]; value heads pass through unchanged. It runs on the projection's
 * output, before RoPE. qkv, out [N, (NH + 2·NKV)·hd]; rstd [N, NH + NKV] (per token: the query
 * heads', then the key heads'). */
void qk_norm_forward_cpu(float *out, float *rstd, const float *qkv, const float *q_norm, const float *k_norm,
                         const QkvLayout *s, float eps, int one_plus_w);
void qk_norm_backward_cpu(float *dqkv, float *dq_norm, float *dk_norm, const float *dout, const float *qkv,
                          const float *q_norm, const float *k_norm, const float *rstd, const QkvLayout *s,
                          int one_plus_w);

/* ---- Rotary position embeddings (RopeParams: model/gpt.h, part of the config) ---- */

/* inv_freq [hd/2] (hd even): theta^(-2i/hd) for pair i, then the scaling; computed in fp32 in
 * transformers' order of operations, as its inv_freq buffer is. */
void rope_inv_freq(float *inv_freq, const RopeParams *p, int hd);
/* cos, sin [T, hd/2]: the rotation of pair i at position t, angle pos[t]·inv_freq[i] (the product in fp32,
 * as transformers' rotary embedding forms it). Shared by the batch and by every layer. */
void rope_cos_sin(float *cos_t, float *sin_t, const float *inv_freq, const int *pos, int T, int hd);
/* Rotates every query and key head of the packed rows, row n by its position (qkv_row_position:
 * the row of cos, sin it reads); value heads pass through unchanged. Pairs
 * are (i, i + hd/2), transformers' rotate_half, not adjacent (2i, 2i + 1):
 *   out[i]        = x[i]·cos[t][i] − x[i + hd/2]·sin[t][i]
 *   out[i + hd/2] = x[i + hd/2]·cos[t][i] + x[i]·sin[t][i]
 * The forward may run in place (out == qkv); the backward, a rotation by −angle, needs no input. */
void rope_forward_cpu(float *out, const float *qkv, const float *cos_t, const float *sin_t, const QkvLayout *s);
void rope_backward_cpu(float *dqkv, const float *dout, const float *cos_t, const float *sin_t, const QkvLayout *s);

/* ---- Gated MLP: out = act(gate) · up ----
 * inp [N, 2F] is the packed gate/up projection: HF's gate_proj rows then up_proj rows as one
 * [2F, C] matrix, so each token's row holds gate in columns [0, F) and up in [F, 2F). out [N, F]
 * goes to down_proj. */
typedef enum {
    GLU_SILU,      /* SwiGLU (Llama, Qwen: hidden_act "silu") */
    GLU_GELU_TANH, /* GeGLU (Gemma: hidden_activation "gelu_pytorch_tanh") */
} GluActivation;

void glu_forward_cpu(float *out, const float *inp, size_t N, int F, GluActivation act);
void glu_backward_cpu(float *dinp, const float *dout, const float *inp, size_t N, int F, GluActivation act);

/* ---- Grouped-query causal attention on the packed qkv rows ---- */
typedef struct {
    QkvLayout qkv;
    float scale; /* multiplies q·k before the softmax: hd^-1/2 for Llama and Qwen (attention_default_scale),
                  * query_pre_attn_scalar^-1/2 for Gemma 3 */
    int window;  /* sliding window W > 0: query t sees keys t − W < t2 <= t (W keys); 0: every t2 <= t.
                  * With documents (qkv.pos) also t2 >= t − pos[t]: the keys of its own document. */
} AttentionParams;

/* hd^-1/2 as transformers forms it (self.scaling = head_dim**-0.5). */
float attention_default_scale(int hd);
/* qkv [N, (NH + 2·NKV)·hd] (after QK-norm and RoPE); out [N, NH·hd] (heads contiguous, o_proj's
 * input); att [B, NH, T, T]: the softmax probabilities, 0 outside the causal window, kept for the
 * backward. */
void gqa_attention_forward_cpu(float *out, float *att, const float *qkv, const AttentionParams *p);
/* dqkv [N, (NH + 2·NKV)·hd]: each key/value head's gradient sums its group's query heads. */
void gqa_attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att,
                                const AttentionParams *p);

#endif
