/* model/cpu/llama_layers_cpu.c - fp32 CPU reference of RMSNorm, QK-norm, RoPE, the gated MLPs and
 * grouped-query attention (see llama_layers_cpu.h for shapes, the packed layouts and the +=
 * convention). Written to read like the math; OpenMP only in attention, where the work is. */
#include "model/cpu/llama_layers_cpu.h"

#include <math.h>
#include <string.h>

#include "model/cpu/layers_cpu.h"

/* ---- Token embedding ---- */

void embedding_forward_cpu(float *out, const int *inp, const float *wte, float scale, size_t N, int C) {
    for (size_t n = 0; n < N; n++) {
        const float *e = wte + (size_t)inp[n] * C;
        for (int i = 0; i < C; i++) out[n * C + i] = e[i] * scale;
    }
}

void embedding_backward_cpu(float *dwte, const float *dout, const int *inp, float scale, int pad, size_t N, int C) {
    for (size_t n = 0; n < N; n++) {
        if (inp[n] == pad) continue;
        float *d = dwte + (size_t)inp[n] * C;
        for (int i = 0; i < C; i++) d[i] += dout[n * C + i] * scale;
    }
}

/* ---- RMSNorm ---- */

/* What the normalised value is multiplied by: w, or Gemma's 1 + w. */
static float norm_gain(const float *weight, int i, int one_plus_w) {
    return one_plus_w ? 1.0f + weight[i] : weight[i];
}

void rmsnorm_forward_cpu(float *out, float *rstd, const float *inp, const float *weight, size_t N, int C, float eps,
                         int one_plus_w) {
    for (size_t n = 0; n < N; n++) {
        const float *x = inp + n * C;
        float *o = out + n * C;
        float ms = 0.0f;
        for (int i = 0; i < C; i++) ms += x[i] * x[i];
        ms /= C;
        float s = 1.0f / sqrtf(ms + eps);
        /* transformers normalises first and multiplies by the weight after, both in fp32 */
        for (int i = 0; i < C; i++) o[i] = (x[i] * s) * norm_gain(weight, i, one_plus_w);
        rstd[n] = s;
    }
}

void rmsnorm_backward_cpu(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, size_t N, int C, int one_plus_w) {
    for (size_t n = 0; n < N; n++) {
        const float *d = dout + n * C, *x = inp + n * C;
        float *dx = dinp + n * C;
        float s = rstd[n];
        /* dx = s·(dnorm − norm·mean(dnorm·norm)), dnorm = g·dout: LayerNorm's without the mean terms */
        float dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) dnorm_norm_mean += norm_gain(weight, i, one_plus_w) * d[i] * (x[i] * s);
        dnorm_norm_mean /= C;
        for (int i = 0; i < C; i++) {
            float norm = x[i] * s;
            dweight[i] += norm * d[i];
            dx[i] += s * (norm_gain(weight, i, one_plus_w) * d[i] - norm * dnorm_norm_mean);
        }
    }
}

/* ---- QK-norm: the query heads, then the key heads, of each token are NH and NKV contiguous rows
 * of hd, so each is one RMSNorm call ---- */

void qk_norm_forward_cpu(float *out, float *rstd, const float *qkv, const float *q_norm, const float *k_norm,
                         const QkvLayout *s, float eps, int one_plus_w) {
    size_t R = qkv_row_width(s), q = (size_t)s->NH * s->hd, k = (size_t)s->NKV * s->hd;
    for (size_t n = 0; n < (size_t)s->B * s->T; n++) {
        const float *x = qkv + n * R;
        float *o = out + n * R, *r = rstd + n * (size_t)(s->NH + s->NKV);
        rmsnorm_forward_cpu(o, r, x, q_norm, s->NH, s->hd, eps, one_plus_w);
        rmsnorm_forward_cpu(o + q, r + s->NH, x + q, k_norm, s->NKV, s->hd, eps, one_plus_w);
        memcpy(o + q + k, x + q + k, k * sizeof(float));
    }
}

void qk_norm_backward_cpu(float *dqkv, float *dq_norm, float *dk_norm, const float *dout, const float *qkv,
                          const float *q_norm, const float *k_norm, const float *rstd, const QkvLayout *s,
                          int one_plus_w) {
    size_t R = qkv_row_width(s), q = (size_t)s->NH * s->hd, k = (size_t)s->NKV * s->hd;
    for (size_t n = 0; n < (size_t)s->B * s->T; n++) {
        const float *x = qkv + n * R, *d = dout + n * R, *r = rstd + n * (size_t)(s->NH + s->NKV);
        float *dx = dqkv + n * R;
        rmsnorm_backward_cpu(dx, dq_norm, d, x, q_norm, r, s->NH, s->hd, one_plus_w);
        rmsnorm_backward_cpu(dx + q, dk_norm, d + q, x + q, k_norm, r + s->NH, s->NKV, s->hd, one_plus_w);
        for (size_t i = q + k; i < R; i++) dx[i] += d[i];
    }
}

/* ---- RoPE ---- */

void rope_inv_freq(float *inv_freq, const RopeParams *p, int hd) {
    /* Every step in fp32 and in the order transformers takes, so the frequencies are its buffer's
     * (torch evaluates scalar / tensor as reciprocal(tensor) · scalar). */
    const float factor = (float)p->factor, old_len = (float)p->original_max_position_embeddings;
    const float low_freq_wavelen = (float)(p->original_max_position_embeddings / p->low_freq_factor);
    const float high_freq_wavelen = (float)(p->original_max_position_embeddings / p->high_freq_factor);
    for (int i = 0; i < hd / 2; i++) {
        float f = 1.0f / powf((float)p->theta, (float)(2 * i) / (float)hd);
        if (p->scaling == ROPE_SCALING_LINEAR) {
            f = f / factor;
        } else if (p->scaling == ROPE_SCALING_LLAMA3) {
            /* long wavelengths (low frequencies) are divided by factor, short ones kept, and those
             * between blend the two, linearly in old_len / wavelen */
            float wavelen = (1.0f / f) * (float)(2.0 * M_PI);
            if (wavelen > low_freq_wavelen) {
                f = f / factor;
            } else if (!(wavelen < high_freq_wavelen)) {
                float smooth = ((1.0f / wavelen) * old_len - (float)p->low_freq_factor) /
                               (float)(p->high_freq_factor - p->low_freq_factor);
                f = (1.0f - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = f;
    }
}

void rope_cos_sin(float *cos_t, float *sin_t, const float *inv_freq, const int *pos, int T, int hd) {
    int H = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < H; i++) {
            float angle = (float)pos[t] * inv_freq[i];
            cos_t[(size_t)t * H + i] = (float)cos((double)angle);
            sin_t[(size_t)t * H + i] = (float)sin((double)angle);
        }
}

void rope_forward_cpu(float *out, const float *qkv, const float *cos_t, const float *sin_t, const QkvLayout *s) {
    size_t R = qkv_row_width(s), qk = (size_t)(s->NH + s->NKV) * s->hd;
    int H = s->hd / 2;
    for (size_t n = 0; n < (size_t)s->B * s->T; n++) {
        const size_t at = (size_t)qkv_row_position(s, n);
        const float *c = cos_t + at * H, *sn = sin_t + at * H;
        const float *x = qkv + n * R;
        float *o = out + n * R;
        for (int h = 0; h < s->NH + s->NKV; h++) {
            const float *xh = x + (size_t)h * s->hd;
            float *oh = o + (size_t)h * s->hd;
            for (int i = 0; i < H; i++) {
                float x1 = xh[i], x2 = xh[i + H]; /* read both before writing: out may be qkv */
                oh[i] = x1 * c[i] - x2 * sn[i];
                oh[i + H] = x2 * c[i] + x1 * sn[i];
            }
        }
        if (o != x) memcpy(o + qk, x + qk, (R - qk) * sizeof(float));
    }
}

void rope_backward_cpu(float *dqkv, const float *dout, const float *cos_t, const float *sin_t, const QkvLayout *s) {
    size_t R = qkv_row_width(s), qk = (size_t)(s->NH + s->NKV) * s->hd;
    int H = s->hd / 2;
    for (size_t n = 0; n < (size_t)s->B * s->T; n++) {
        const size_t at = (size_t)qkv_row_position(s, n);
        const float *c = cos_t + at * H, *sn = sin_t + at * H;
        const float *d = dout + n * R;
        float *dx = dqkv + n * R;
        for (int h = 0; h < s->NH + s->NKV; h++) {
            const float *dh = d + (size_t)h * s->hd;
            float *dxh = dx + (size_t)h * s->hd;
            /* the transpose of the rotation: rotate by −angle */
            for (int i = 0; i < H; i++) {
                dxh[i] += dh[i] * c[i] + dh[i + H] * sn[i];
                dxh[i + H] += dh[i + H] * c[i] - dh[i] * sn[i];
            }
        }
        for (size_t i = qk; i < R; i++) dx[i] += d[i];
    }
}

/* ---- Gated MLP ---- */

static float silu(float x) {
    return x / (1.0f + expf(-x));
}

static float silu_grad(float x) {
    float sig = 1.0f / (1.0f + expf(-x));
    return sig * (1.0f + x * (1.0f - sig));
}

void glu_forward_cpu(float *out, const float *inp, size_t N, int F, GluActivation act) {
    for (size_t n = 0; n < N; n++) {
        const float *gate = inp + n * 2 * F, *up = gate + F;
        float *o = out + n * F;
        for (int i = 0; i < F; i++) o[i] = (act == GLU_SILU ? silu(gate[i]) : gelu_tanh(gate[i])) * up[i];
    }
}

void glu_backward_cpu(float *dinp, const float *dout, const float *inp, size_t N, int F, GluActivation act) {
    for (size_t n = 0; n < N; n++) {
        const float *gate = inp + n * 2 * F, *up = gate + F, *d = dout + n * F;
        float *dgate = dinp + n * 2 * F, *dup = dgate + F;
        for (int i = 0; i < F; i++) {
            float a = act == GLU_SILU ? silu(gate[i]) : gelu_tanh(gate[i]);
            float da = act == GLU_SILU ? silu_grad(gate[i]) : gelu_tanh_grad(gate[i]);
            dgate[i] += d[i] * up[i] * da;
            dup[i] += d[i] * a;
        }
    }
}

/* ---- Grouped-query attention ---- */

float attention_default_scale(int hd) {
    return (float)pow((double)hd, -0.5);
}

/* The first key that query t of sequence b sees: its document's first row, or the window's. */
static int first_key(const AttentionParams *p, int b, int t) {
    const int doc = t - qkv_row_position(&p->qkv, (size_t)b * p->qkv.T + t);
    const int win = p->window > 0 && t - p->window + 1 > 0 ? t - p->window + 1 : 0;
    return doc > win ? doc : win;
}

void gqa_attention_forward_cpu(float *out, float *att, const float *qkv, const AttentionParams *p) {
    const QkvLayout *s = &p->qkv;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, hd = s->hd, group = NH / NKV;
    const size_t R = qkv_row_width(s);
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const int kv = h / group, t0 = first_key(p, b, t);
                const float *q = qkv + ((size_t)b * T + t) * R + (size_t)h * hd;
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = t0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * R + (size_t)(NH + kv) * hd;
                    float dot = 0.0f;
                    for (int i = 0; i < hd; i++) dot += q[i] * k[i];
                    a[t2] = dot * p->scale;
                    if (a[t2] > maxv) maxv = a[t2];
                }
                float sum = 0.0f;
                for (int t2 = t0; t2 <= t; t2++) {
                    a[t2] = expf(a[t2] - maxv);
                    sum += a[t2];
                }
                for (int t2 = 0; t2 < T; t2++) a[t2] = t2 >= t0 && t2 <= t ? a[t2] / sum : 0.0f;
                float *o = out + ((size_t)b * T + t) * NH * hd + (size_t)h * hd;
                for (int i = 0; i < hd; i++) o[i] = 0.0f;
                for (int t2 = t0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * R + (size_t)(NH + NKV + kv) * hd;
                    for (int i = 0; i < hd; i++) o[i] += a[t2] * v[i];
                }
            }
}

void gqa_attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att,
                                const AttentionParams *p) {
    const QkvLayout *s = &p->qkv;
    const int B = s->B, T = s->T, NH = s->NH, NKV = s->NKV, hd = s->hd, group = NH / NKV;
    const size_t R = qkv_row_width(s);
    /* Parallel over (b, key/value head): a group's query heads all add into the same dk and dv, so
     * one thread owns the whole group. */
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int kv = 0; kv < NKV; kv++)
            for (int h = kv * group; h < (kv + 1) * group; h++)
                for (int t = 0; t < T; t++) {
                    const int t0 = first_key(p, b, t);
                    const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                    const float *d = dout + ((size_t)b * T + t) * NH * hd + (size_t)h * hd;
                    const float *q = qkv + ((size_t)b * T + t) * R + (size_t)h * hd;
                    float *dq = dqkv + ((size_t)b * T + t) * R + (size_t)h * hd;
                    /* datt[t2] = d·v[t2]; dv[t2] += a[t2]·d; softmax backward: ds = a·(datt − Σ a·datt) */
                    float dot = 0.0f;
                    for (int t2 = t0; t2 <= t; t2++) {
                        const size_t v_off = ((size_t)b * T + t2) * R + (size_t)(NH + NKV + kv) * hd;
                        const float *v = qkv + v_off;
                        float *dv = dqkv + v_off;
                        float datt = 0.0f;
                        for (int i = 0; i < hd; i++) {
                            datt += d[i] * v[i];
                            dv[i] += a[t2] * d[i];
                        }
                        dot += a[t2] * datt;
                    }
                    for (int t2 = t0; t2 <= t; t2++) {
                        const size_t k_off = ((size_t)b * T + t2) * R + (size_t)(NH + kv) * hd;
                        const float *v = qkv + k_off + (size_t)NKV * hd, *k = qkv + k_off;
                        float *dk = dqkv + k_off;
                        float datt = 0.0f;
                        for (int i = 0; i < hd; i++) datt += d[i] * v[i];
                        float ds = a[t2] * (datt - dot) * p->scale;
                        for (int i = 0; i < hd; i++) {
                            dq[i] += ds * k[i];
                            dk[i] += ds * q[i];
                        }
                    }
                }
}
