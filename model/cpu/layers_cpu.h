/* model/cpu/layers_cpu.h - the fp32 CPU reference of every GPT-2 layer: the oracle every CUDA kernel
 * is tested against, and the layers of `./train --device cpu`.
 *
 * Shapes: B batch, T time, C channels, NH heads (HS = C/NH), OC output channels, N = B·T.
 * All layouts are row-major; matmul weights are [OC, C] (llm.c's layout).
 * Convention (as llm.c): forward functions overwrite their outputs; backward functions ADD (+=)
 * into every gradient they produce, parameters and inputs alike, so gradient accumulation over
 * micro-batches and the residual stream's fan-out need no extra buffers. */
#ifndef FUSEDGPT_LAYERS_CPU_H
#define FUSEDGPT_LAYERS_CPU_H

#include <math.h>
#include <stddef.h>

#define LAYERNORM_EPS 1e-5f

/* Documents: pos [B·T] gives each token's position in its document, the rows of a sequence being one
 * or more documents packed end to end (0 at each document's first token); NULL: every sequence is one
 * document, token t at position t. */

/* out[b,t,:] = wte[inp[b,t],:] + wpe[pos[b,t],:] */
void encoder_forward_cpu(float *out, const int *inp, const int *pos, const float *wte, const float *wpe, int B, int T,
                         int C);
void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *inp, const int *pos, int B, int T,
                          int C);

/* mean, rstd: [B·T], kept for the backward. */
void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                           const float *bias, int B, int T, int C);
void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int B, int T, int C);

/* out[N, OC] = inp[N, C] · weight[OC, C]^T + bias[OC] (bias may be NULL). */
void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC);
void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                         const float *weight, int N, int C, int OC);

/* qkv [B, T, 3C] (q, k, v each C wide, heads contiguous within each); out [B, T, C];
 * att [B, NH, T, T] holds the causal softmax probabilities for the backward. With documents (pos),
 * query t sees keys t − pos[t] .. t, its own document's. */
void attention_forward_cpu(float *out, float *att, const float *qkv, const int *pos, int B, int T, int C, int NH);
/* Row t alone of one sequence's causal attention, for decoding against cached keys and values:
 * qkv holds the sequence's rows 0..t ([t+1, 3C], each row's k and v as the forward left them);
 * out [C] (=) is row t's output, att [NH, t+1] (=) scratch for its probabilities. Bit-identical to
 * row t of attention_forward_cpu. */
void attention_decode_cpu(float *out, float *att, const float *qkv, int t, int C, int NH);
void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att, const int *pos,
                            int B, int T, int C, int NH);

/* GELU, tanh approximation (GPT-2's; PyTorch's gelu(approximate="tanh")). The scalar forms are
 * shared with the gated MLPs (GeGLU). */
#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
static inline float gelu_tanh(float x) {
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + 0.044715f * x * x * x)));
}
static inline float gelu_tanh_grad(float x) {
    float th = tanhf(GELU_SCALE * (x + 0.044715f * x * x * x));
    float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
}
void gelu_forward_cpu(float *out, const float *inp, size_t N);
void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N);

void residual_forward_cpu(float *out, const float *a, const float *b, size_t N);

#endif
