/* kernels/kernels.h - the CUDA kernels of one GPT-2 training step (all but the output layer, which
 * has its own header), as extern "C" launchers that a C or CUDA backend calls.
 *
 * Shapes: B batch, T time, C channels, NH heads, HS = C/NH head size, OC output channels,
 * N = B·T rows, Vp padded vocabulary, maxT context length. Row-major everywhere; matmul weights are
 * [OC, C] (llm.c's layout), qkv is [B, T, 3C] (q, k, v each C wide, heads contiguous within each)
 * exactly as in model/cpu/layers_cpu.h.
 *
 * Precisions: activations and weights bf16 (kbf16); parameter gradients, master weights, AdamW
 * moments, LayerNorm mean/rstd and attention log-sum-exp fp32.
 *
 * The += / = convention (differs from layers_cpu.h where the bf16 buffers would pay for it):
 *   - parameter gradients (fp32) are always ADDED to (+=), so micro-batches accumulate;
 *   - activation gradients are OVERWRITTEN (=), except layernorm_backward's dinp, which is ADDED
 *     to because it is the residual stream's gradient (every block adds into it).
 *
 * Alignment: every pointer 16-byte aligned (cudaMalloc gives 256), C, OC and HS multiples of 8.
 * Every launcher is asynchronous on its stream, checks its launches, and never allocates, except
 * the first matmul call of each shape (plan + heuristic, cached) and the first call that creates
 * the cuBLASLt handle and workspace; matmul_free() releases them. Not thread-safe: one host
 * thread per device, as in the trainer. Scratch buffers are owned by the caller; their sizes come
 * from the *_scratch_bytes functions (call them once at start-up, they do not depend on data). */
#ifndef FUSEDGPT_KERNELS_H
#define FUSEDGPT_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/gated_mlp_fits.h"
#include "kernels/host_device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- encoder.cu: token + position embedding ---------------------------------------------- */
/* out[b,t,:] = wte[inp[b,t],:]·scale + wpe[p,:]   (= ; fp32 math, one bf16 rounding), p = t, or
 * pos[b,t] with documents (pos on the device, backend.h; NULL: t). inp on the device, every token in
 * [0, Vp). wpe == NULL: the token embedding alone (RoPE families). scale: gpt_embed_scale (Gemma's
 * sqrt(C), else 1). */
void encoder_forward(kbf16 *out, const int *inp, const int *pos, const kbf16 *wte, const kbf16 *wpe, float scale,
                     int B, int T, int C, cudaStream_t stream);
/* dwte[inp[b,t],:] += scale·dout[b,t,:] for every token but pad (nn.Embedding's padding_idx: its row
 * gets no gradient; pad < 0: none); dwpe[p,:] += the rows of dout at position p (Σ_b dout[b,p,:]
 * without documents) unless dwpe == NULL (dwte == NULL: dwpe alone)   (+= into fp32, deterministic:
 * rows are sorted by token, or by position, with a stable radix sort and each one's rows summed in
 * row order by one block; no atomics). scratch: encoder_backward_scratch_bytes(B·T, Vp) bytes. */
size_t encoder_backward_scratch_bytes(int N, int Vp);
void encoder_backward(float *dwte, float *dwpe, void *scratch, const kbf16 *dout, const int *inp, const int *pos,
                      float scale, int pad, int B, int T, int C, int Vp, cudaStream_t stream);
/* Over wte's rows [v0, v0 + Vs) (wte_slice, the rows a rank owns), for N positions (every rank's,
 * sequences of T): out[n,:] = wte_slice[inp[n] - v0,:]·scale (+ wpe[n mod T,:] unless wpe == NULL)
 * where the slice holds inp[n], else 0   (=, exact: the ranks' outputs summed are encoder_forward's
 * bitwise), and dwte_slice[tok - v0,:] += scale·(the rows of dout at tok) for the slice's tokens
 * but pad (a whole-vocabulary id; < 0: none) only (+= fp32, deterministic; the slices side by side
 * are encoder_backward's dwte bitwise). scratch: encoder_slice_backward_scratch_bytes(N, Vs) bytes. */
void encoder_slice_forward(kbf16 *out, const int *inp, const kbf16 *wte_slice, const kbf16 *wpe, float scale, int v0,
                           int Vs, int N, int T, int C, cudaStream_t stream);
size_t encoder_slice_backward_scratch_bytes(int N, int Vs);
void encoder_slice_backward(float *dwte_slice, void *scratch, const kbf16 *dout, const int *inp, float scale, int pad,
                            int v0, int Vs, int N, int C, cudaStream_t stream);

/* ---- layernorm.cu: residual add fused with LayerNorm ------------------------------------ */
/* residual = a + b (rounded to bf16; skipped when b == NULL, then residual may be NULL and the
 * LayerNorm reads a), ln = LN(residual)·weight + bias, mean/rstd [N] fp32 saved for the backward.
 * All outputs =. LN normalises the bf16 residual as stored, so the backward sees the same input. */
void residual_layernorm_forward(kbf16 *residual, kbf16 *ln, float *mean, float *rstd, const kbf16 *a,
                                const kbf16 *b, const kbf16 *weight, const kbf16 *bias, int N, int C,
                                cudaStream_t stream);
/* dinp += LN-backward(dout)  (bf16 read-add-write: the residual stream's gradient);
 * dweight += Σ_n dout·norm, dbias += Σ_n dout  (fp32, fixed-order two-pass reduction);
 * when dinp_sum != NULL also dinp_sum[c] += Σ_n dinp[n,c] over the updated bf16 values (the bias
 * gradient of the projection whose output fed this residual, as bias_backward would give it).
 * inp is the LN input (the residual), mean/rstd from the forward.
 * scratch: layernorm_backward_scratch_bytes(C) bytes. */
size_t layernorm_backward_scratch_bytes(int C);
/* The widest C layernorm_backward runs on the current device: past 2048 its kernel keeps two rows of
 * C floats a warp in shared memory (7264 on an H100). */
int layernorm_backward_max_dim(void);
void layernorm_backward(kbf16 *dinp, float *dweight, float *dbias, float *dinp_sum, void *scratch,
                        const kbf16 *dout, const kbf16 *inp, const kbf16 *weight, const float *mean,
                        const float *rstd, int N, int C, cudaStream_t stream);

/* ---- rmsnorm.cu: residual add fused with RMSNorm (Llama, Qwen, Gemma) --------------------- */
/* residual = a + b (rounded to bf16; skipped when b == NULL, then residual may be NULL and the norm
 * reads a); out = residual·rstd·g, g = weight, or 1 + weight when one_plus_w (Gemma);
 * rstd [N] = 1/sqrt(mean(residual²) + eps) fp32, saved for the backward. All outputs =. Any C ≥ 1
 * (16-byte vectors when C % 8 == 0, registers up to C = 8192). */
void residual_rmsnorm_forward(kbf16 *residual, kbf16 *out, float *rstd, const kbf16 *a, const kbf16 *b,
                              const kbf16 *weight, int N, int C, float eps, int one_plus_w, cudaStream_t stream);
/* dinp += RMSNorm-backward(dout) (bf16 read-add-write: the residual stream's gradient);
 * dweight += Σ_n (inp·rstd)·dout (fp32, fixed-order two-pass reduction). inp is the norm's input
 * (the residual), rstd from the forward. scratch: rmsnorm_backward_scratch_bytes(C) bytes. */
size_t rmsnorm_backward_scratch_bytes(int C);
void rmsnorm_backward(kbf16 *dinp, float *dweight, void *scratch, const kbf16 *dout, const kbf16 *inp,
                      const kbf16 *weight, const float *rstd, int N, int C, int one_plus_w, cudaStream_t stream);

/* ---- rope.cu: QK-norm and rotary position embeddings on the packed qkv rows --------------- */
/* qkv rows [B·T, (NH + 2·NKV)·hd]: per token NH query heads, NKV key heads, NKV value heads. */
typedef struct {
    int B, T, NH, NKV, hd; /* hd even, ≤ 256 */
    float eps;             /* QK-norm's epsilon */
    int one_plus_w;        /* QK-norm multiplies by 1 + w (Gemma) */
    const int *pos;        /* on the device, [B·T]: each token's position in its document (backend.h), the
                            * row of cos, sin it takes; NULL: token t of a sequence at position t */
} RopeShape;
/* out (=) = RoPE(QK-norm(inp)) on the query and key heads; out's value heads are not written (the
 * attention reads them from inp: attention_forward's v); rotate-half pairs
 * (i, i + hd/2) at positions 0..T-1 with cos, sin [T, hd/2] fp32 on the device (rope_cos_sin of
 * model/cpu/llama_layers_cpu.h). QK-norm (q_norm, k_norm [hd] bf16) runs only when q_norm != NULL,
 * and then writes rstd [B·T, NH + NKV] (=; query heads', then key heads'). out may be inp. */
void rope_forward(kbf16 *out, float *rstd, const kbf16 *inp, const kbf16 *q_norm, const kbf16 *k_norm,
                  const float *cos_t, const float *sin_t, const RopeShape *s, cudaStream_t stream);
/* dinp (=) the gradient of inp given dout, the gradient of out (dinp may be dout). With QK-norm
 * (q_norm != NULL), inp is the forward's input and rstd its output, and dq_norm, dk_norm += their
 * gradients (fp32, fixed-order two-pass reduction); without, inp and rstd are not read.
 * scratch: rope_backward_scratch_bytes(s) bytes. */
size_t rope_backward_scratch_bytes(const RopeShape *s);
void rope_backward(kbf16 *dinp, float *dq_norm, float *dk_norm, void *scratch, const kbf16 *dout, const kbf16 *inp,
                   const kbf16 *q_norm, const kbf16 *k_norm, const float *rstd, const float *cos_t,
                   const float *sin_t, const RopeShape *s, cudaStream_t stream);

/* ---- attention.cu: causal self-attention, flash-attention style ------------------------- */
/* The shape of one attention call. qkv holds per token all NH query heads, then NKV key heads, then
 * NKV value heads, HS columns each ((NH + 2·NKV)·HS, the packed q/k/v rows of the parameter table);
 * query head h reads key/value head h / (NH/NKV) (grouped-query attention; NKV = NH is multi-head).
 * scale multiplies q·k before the softmax: 1/sqrt(HS) for GPT-2, Llama and Qwen (Gemma passes
 * query_pre_attn_scalar^-1/2). window 0: full causal; W > 0: query i sees keys i-W < j <= i.
 * pos: NULL, or on the device [B·T] each token's position in its document (backend.h), the sequences
 * being documents packed end to end: query i then sees keys from i - pos[i] on, its own document's.
 * v: where the value heads are read, NULL for qkv itself; else a buffer of qkv's layout whose value
 * columns hold them (the projection's rows, when only the query and key heads were rotated into
 * qkv: RoPE leaves the values alone, so they are never copied). */
typedef struct {
    int B, T, NH, NKV, HS;
    float scale;
    int window;
    const int *pos;
} AttentionShape;

/* out [B,T,NH·HS] (=), lse [B,NH,T] (=; fp32 log2-sum-exp of the scaled logits, the only saved state
 * besides out). HS must be 64, 128 or 256; NH a multiple of NKV; any T >= 1; B·NH <= 65535; window >= 0.
 * Never stores T×T; a windowed call's work grows with T·W. As gqa_attention_forward_cpu. */
void attention_forward(kbf16 *out, float *lse, const kbf16 *qkv, const kbf16 *v, const AttentionShape *s,
                       cudaStream_t stream);
/* Hopper's warpgroup MMA kernels unless turned off here (0: the mma.sync kernels, at HS 64 and 128;
 * HS 256 always runs on wgmma); for tests and benchmarks that compare the two. */
void attention_use_wgmma(int on);
/* dqkv like qkv (=; q, k and v parts all written), v as in attention_forward. dout is the gradient of out; out and lse are the
 * forward's outputs (out is read for rowsum(dout·out)). Recomputes the probabilities; no atomics:
 * deterministic (on Hopper at head sizes 64 and 128 one kernel by key tile of a key/value head, dQ's
 * shares summed in a fixed order; else a dK,dV kernel beside a dQ kernel by query tile).
 * When dbias_qkv != NULL also dbias_qkv[c] += Σ_n dqkv[n,c] over the stored bf16 values, for all
 * (NH + 2·NKV)·HS columns (the qkv projection's bias gradient, as bias_backward would give it).
 * scratch: attention_backward_scratch_bytes(s) bytes (rowsum(dout·out), bias partials, and on the
 * Hopper path dQ's fp32 sums over key blocks). */
size_t attention_backward_scratch_bytes(const AttentionShape *s);
void attention_backward(kbf16 *dqkv, float *dbias_qkv, void *scratch, const kbf16 *dout, const kbf16 *qkv,
                        const kbf16 *v, const kbf16 *out, const float *lse, const AttentionShape *s,
                        cudaStream_t stream);

/* ---- attention_decode.cu: one query row against cached keys and values ----------------- */
/* out [NH·HS] (=): row t's attention output, softmax(scale·q·kᵀ)·v over the keys row t sees (0..t,
 * or the last `window` of them) in fp32, as row t of attention_forward. qkv holds one sequence's rows
 * 0..t in the forward's layout (the cache is the keys and values the forward left in its qkv rows,
 * or the values in v's rows when v is given, as in attention_forward); s->B and s->T are not read. HS a multiple of 32 up to 256; any t >= 0. */
void attention_decode(kbf16 *out, const kbf16 *qkv, const kbf16 *v, int t, const AttentionShape *s,
                      cudaStream_t stream);

/* ---- gelu.cu: GELU (tanh approximation) and bias gradients ------------------------------- */
/* out = gelu(inp) (=). n elements, a multiple of 8. */
void gelu_forward(kbf16 *out, const kbf16 *inp, size_t n, cudaStream_t stream);
/* dinp = gelu'(inp)·dout (=; dinp may alias dout). */
void gelu_backward(kbf16 *dinp, const kbf16 *inp, const kbf16 *dout, size_t n, cudaStream_t stream);
/* dbias[oc] += Σ_n dout[n,oc]  (fp32, fixed-order two-pass). scratch: bias_backward_scratch_bytes(OC). */
size_t bias_backward_scratch_bytes(int OC);
void bias_backward(float *dbias, void *scratch, const kbf16 *dout, int N, int OC, cudaStream_t stream);

/* ---- swiglu.cu: the gated MLP's activation --------------------------------------------------- */
typedef enum {
    GATED_SILU,      /* SwiGLU (Llama, Qwen) */
    GATED_GELU_TANH, /* GeGLU (Gemma) */
} GatedAct;
/* out [N, F] (=) = act(gate)·up, inp [N, 2F] per token gate F then up F (the packed gate/up
 * projection). Any F. */
void gated_forward(kbf16 *out, const kbf16 *inp, size_t N, int F, GatedAct act, cudaStream_t stream);
/* dinp [N, 2F] (=): dgate = dout·up·act'(gate), dup = dout·act(gate); and, when out != NULL,
 * out [N, F] (=) the same bits gated_forward writes, for the down projection's weight gradient. */
void gated_backward(kbf16 *dinp, kbf16 *out, const kbf16 *dout, const kbf16 *inp, size_t N, int F, GatedAct act,
                    cudaStream_t stream);

/* ---- gated_mlp.cu: the gated MLP's products with the activation in their epilogues (Hopper) ---- */
/* They take an MLP whose weight (wfc or wproj) passes gated_mlp_fits (kernels/gated_mlp_fits.h); the
 * others take matmul_forward + gated_forward, matmul_backward + gated_backward. The activations'
 * buffers must be 16-byte aligned. */
/* gu [N, 2F] (=) x [N, C]·wfc [2F, C]^T in bf16 (gate rows then up rows, as matmul_forward's), and out
 * [N, F] (=) act(gate)·up: gated_forward's values. */
void gated_mlp_forward(kbf16 *gu, kbf16 *out, const kbf16 *x, const kbf16 *wfc, size_t N, int C, int F, GatedAct act,
                       cudaStream_t stream);
/* dgu [N, 2F] (=) gated_backward's gradient and out [N, F] (=) the product, from the down projection's
 * input gradient dout [N, C]·wproj [C, F] (rounded to bf16 as matmul_backward's, never stored) and
 * gu [N, 2F]. */
void gated_mlp_backward(kbf16 *dgu, kbf16 *out, const kbf16 *dout, const kbf16 *wproj, const kbf16 *gu, size_t N,
                        int C, int F, GatedAct act, cudaStream_t stream);

/* ---- matmul.cu: cuBLASLt, plans and heuristics cached per shape ------------------------- */
/* out[N,OC] = inp[N,C]·weight[OC,C]^T (+ bias[OC] when bias != NULL)   (=).
 * When pre_gelu != NULL the GELU epilogue is fused: pre_gelu = inp·W^T + bias, out = gelu(pre_gelu). */
void matmul_forward(kbf16 *out, kbf16 *pre_gelu, const kbf16 *inp, const kbf16 *weight, const kbf16 *bias,
                    int N, int C, int OC, cudaStream_t stream);
/* dinp[N,C] = dout[N,OC]·weight   (=, bf16), and when pre_gelu != NULL the dGELU epilogue is fused:
 * dinp = (dout·weight) ∘ gelu'(pre_gelu), pre_gelu [N,C] being the pre-activation whose GELU was this
 * matmul's input. dweight[OC,C] += dout^T·inp (fp32 accumulate, in cuBLASLt). dbias[OC] += Σ_n dout
 * when dbias != NULL (needs scratch of bias_backward_scratch_bytes(OC) bytes, else scratch may be
 * NULL). dinp == NULL skips that product (e.g. for the first layer's input). */
void matmul_backward(kbf16 *dinp, float *dweight, float *dbias, void *scratch, const kbf16 *dout,
                     const kbf16 *inp, const kbf16 *weight, const kbf16 *pre_gelu, int N, int C, int OC,
                     cudaStream_t stream);
/* All matmuls share one 32 MiB cuBLASLt workspace: issue them on one stream, or order the streams
 * (two matmuls running at once on different streams would race on it). */
/* Frees the cuBLASLt handle, workspace and cached plans (call once at shutdown). */
void matmul_free(void);

/* ---- adamw.cu: global gradient norm and fused AdamW -------------------------------------- */
/* *sumsq = Σ grads[i]^2 over n fp32 values (=, fp64 result on the device), fixed-order two-pass
 * reduction with a fixed grid: bit-identical across runs. scratch: global_sumsq_scratch_bytes(). */
size_t global_sumsq_scratch_bytes(void);
void global_sumsq(double *sumsq, void *scratch, const float *grads, size_t n, cudaStream_t stream);

/* The parameter tensors laid out in one flat buffer: which ranges decay. Built once at start-up
 * (uploads a small chunk table: every chunk lies inside one tensor). */
typedef struct AdamWPlan AdamWPlan;
AdamWPlan *adamw_plan_create(const size_t *offsets, const size_t *numels, const int *weight_decay, int count);
/* A plan over part of the flat layout (a data-parallel rank's shard, ZeRO-1): elements
 * [begin, begin + count) of the weights live at state_offset.. in master, m, v and grads. */
typedef struct {
    size_t begin, count, state_offset;
} AdamWRange;
AdamWPlan *adamw_plan_create_ranges(const size_t *offsets, const size_t *numels, const int *weight_decay,
                                    int count, const AdamWRange *ranges, int nranges);
void adamw_plan_free(AdamWPlan *plan);
/* For every element i of the plan's tensors (PyTorch AdamW, as model/cpu/backend_cpu.c), s its state
 * index (s = i for a plan without ranges):
 *   g = grads[s]·grad_scale; m = β1·m + (1−β1)·g; v = β2·v + (1−β2)·g²;
 *   master -= lr·( (m/(1−β1^step)) / (sqrt(v/(1−β2^step)) + eps) + wd·master ),  wd = 0 unless flagged;
 *   params_bf16[i] = round_to_nearest_bf16(master).
 * master, m, v updated in place (fp32); params_bf16 (=) may be NULL. grads are read only. */
void adamw_update(const AdamWPlan *plan, float *master, kbf16 *params_bf16, const float *grads, float *m,
                  float *v, float lr, float beta1, float beta2, float eps, float weight_decay, float grad_scale,
                  int step, cudaStream_t stream);
/* The same update on bf16 state (--optimizer-state bf16, kernels/adamw_bf16.h): no master copy, the
 * bf16 params, m and v (at s) read, updated in fp32 and rounded back stochastically, the random bits
 * keyed by step and the flat index index0 + i. Bit-identical to the CPU reference. */
void adamw_update_bf16(const AdamWPlan *plan, kbf16 *params_bf16, const float *grads, kbf16 *m, kbf16 *v,
                       uint64_t index0, float lr, float beta1, float beta2, float eps, float weight_decay,
                       float grad_scale, int step, cudaStream_t stream);
/* params_bf16[i] = bf16(master[i]) for n values (start-up and after loading a checkpoint). */
void convert_fp32_to_bf16(kbf16 *out, const float *in, size_t n, cudaStream_t stream);
/* out[i] = in[i] as fp32 for n values (bf16 state to a checkpoint). */
void convert_bf16_to_fp32(float *out, const kbf16 *in, size_t n, cudaStream_t stream);

/* ---- wire_sum.cu: the bf16 gradient wire's sum ------------------------------------------- */
/* out[i] = p_0[i] + p_1[i] + ... + p_{nparts-1}[i] in fp32, from p_0 on, p_r = parts + r·stride
 * (bf16 values, one part a rank): the same bits whichever rank sums them. */
void sum_bf16_parts(float *out, const kbf16 *parts, size_t stride, int nparts, size_t n, cudaStream_t stream);

/* ---- rank_sum.cu: ZeRO-1's reduce-scatter by loads on one NVLink host ---------------------- */
/* Every rank's gradients as this GPU reads them (for a peer, the address that maps its memory), in
 * rank order, each 16-byte aligned; all hold a value at the same index. */
#define RANK_SUM_MAX_WORLD 8
typedef struct {
    const float *rank[RANK_SUM_MAX_WORLD];
    int world;
} RankSumSources;
/* Values [src, src + count) of every rank's gradients, summed into dst[dst] onward. */
typedef struct {
    size_t src, dst, count;
} RankSumPiece;
typedef struct RankSumPlan RankSumPlan;
RankSumPlan *rank_sum_plan_create(const RankSumSources *sources, const RankSumPiece *pieces, int count);
void rank_sum_plan_free(RankSumPlan *plan);
/* dst[p.dst + i] = rank_0[p.src + i] + rank_1[p.src + i] + ... in fp32, from rank 0 on, for every
 * piece p and i < p.count: the same bits whichever rank sums them. The sources must be final on every
 * rank before, and stay unchanged until every rank's sum is done (the caller's barriers). */
void rank_sum(const RankSumPlan *plan, float *dst, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
