/* model/cpu/layers_cpu.c - fp32 CPU reference of the GPT-2 layers (see layers_cpu.h for shapes and
 * the += convention). Written to read like the math; OpenMP only where it is free. */
#include "model/cpu/layers_cpu.h"

#include <math.h>
#include <string.h>

/* Token t of sequence b's position (layers_cpu.h: documents). */
static int position_of(const int *pos, int b, int T, int t) {
    return pos ? pos[(size_t)b * T + t] : t;
}

void encoder_forward_cpu(float *out, const int *inp, const int *pos, const float *wte, const float *wpe, int B, int T,
                         int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *te = wte + (size_t)inp[b * T + t] * C, *pe = wpe + (size_t)position_of(pos, b, T, t) * C;
            for (int i = 0; i < C; i++) o[i] = te[i] + pe[i];
        }
}

void encoder_backward_cpu(float *dwte, float *dwpe, const float *dout, const int *inp, const int *pos, int B, int T,
                          int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dte = dwte + (size_t)inp[b * T + t] * C, *dpe = dwpe + (size_t)position_of(pos, b, T, t) * C;
            for (int i = 0; i < C; i++) {
                dte[i] += d[i];
                dpe[i] += d[i];
            }
        }
}

void layernorm_forward_cpu(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                           const float *bias, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        const float *x = inp + (size_t)bt * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) v += (x[i] - m) * (x[i] - m);
        v /= C;
        float s = 1.0f / sqrtf(v + LAYERNORM_EPS);
        float *o = out + (size_t)bt * C;
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[bt] = m;
        rstd[bt] = s;
    }
}

void layernorm_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int B, int T, int C) {
    for (int bt = 0; bt < B * T; bt++) {
        const float *d = dout + (size_t)bt * C, *x = inp + (size_t)bt * C;
        float *dx = dinp + (size_t)bt * C;
        float m = mean[bt], s = rstd[bt];
        /* dx = s·(dnorm − mean(dnorm) − norm·mean(dnorm·norm)), dnorm = weight·dout */
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = weight[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s, dnorm = weight[i] * d[i];
            dbias[i] += d[i];
            dweight[i] += norm * d[i];
            dx[i] += s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
        }
    }
}

void matmul_forward_cpu(float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC) {
    /* One row (decoding a token) stays on one thread: a parallel region per row costs more than it
     * saves, and far more when the cores are shared. */
#pragma omp parallel for if (N > 1)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * OC;
        for (int oc = 0; oc < OC; oc++) {
            const float *w = weight + (size_t)oc * C;
            float acc = bias ? bias[oc] : 0.0f;
            for (int i = 0; i < C; i++) acc += x[i] * w[i];
            o[oc] = acc;
        }
    }
}

void matmul_backward_cpu(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                         const float *weight, int N, int C, int OC) {
    /* Two loops so each parallelises over the index it writes: rows of dinp, then rows of dweight. */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OC;
        float *dx = dinp + (size_t)n * C;
        for (int oc = 0; oc < OC; oc++) {
            const float *w = weight + (size_t)oc * C;
            float g = d[oc];
            for (int i = 0; i < C; i++) dx[i] += w[i] * g;
        }
    }
#pragma omp parallel for
    for (int oc = 0; oc < OC; oc++) {
        float *dw = dweight + (size_t)oc * C;
        float db = 0.0f;
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C;
            float g = dout[(size_t)n * OC + oc];
            db += g;
            for (int i = 0; i < C; i++) dw[i] += x[i] * g;
        }
        if (dbias) dbias[oc] += db;
    }
}

/* Head h of query row t of one sequence (qkv its rows, stride 3C) against its rows t0..t: out [HS]
 * (=), a [t+1] the softmax probabilities (=; 0 before t0). The whole forward and the one-row decode both run
 * this, so a row decoded against cached keys and values is bit-identical to the same row of the
 * whole forward. */
static void attend_row(float *out, float *a, const float *qkv, int t0, int t, int h, int C, int HS) {
    const float scale = 1.0f / sqrtf((float)HS);
    const float *q = qkv + (size_t)t * 3 * C + h * HS;
    float maxv = -INFINITY;
    for (int t2 = 0; t2 < t0; t2++) a[t2] = 0.0f;
    for (int t2 = t0; t2 <= t; t2++) {
        const float *k = qkv + (size_t)t2 * 3 * C + C + h * HS;
        float s = 0.0f;
        for (int i = 0; i < HS; i++) s += q[i] * k[i];
        s *= scale;
        a[t2] = s;
        if (s > maxv) maxv = s;
    }
    float sum = 0.0f;
    for (int t2 = t0; t2 <= t; t2++) {
        a[t2] = expf(a[t2] - maxv);
        sum += a[t2];
    }
    for (int t2 = t0; t2 <= t; t2++) a[t2] /= sum;
    for (int i = 0; i < HS; i++) out[i] = 0.0f;
    for (int t2 = t0; t2 <= t; t2++) {
        const float *v = qkv + (size_t)t2 * 3 * C + 2 * C + h * HS;
        for (int i = 0; i < HS; i++) out[i] += a[t2] * v[i];
    }
}

void attention_forward_cpu(float *out, float *att, const float *qkv, const int *pos, int B, int T, int C, int NH) {
    int HS = C / NH;
#pragma omp parallel for collapse(3)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                float *a = att + (((size_t)b * NH + h) * T + t) * T;
                attend_row(out + ((size_t)b * T + t) * C + h * HS, a, qkv + (size_t)b * T * 3 * C,
                           t - position_of(pos, b, T, t), t, h, C, HS);
                for (int t2 = t + 1; t2 < T; t2++) a[t2] = 0.0f;
            }
}

void attention_decode_cpu(float *out, float *att, const float *qkv, int t, int C, int NH) {
    int HS = C / NH;
    for (int h = 0; h < NH; h++) attend_row(out + (size_t)h * HS, att + (size_t)h * (t + 1), qkv, 0, t, h, C, HS);
}

void attention_backward_cpu(float *dqkv, const float *dout, const float *qkv, const float *att, const int *pos,
                            int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    /* Parallel over (b, h) only: dk and dv of one head receive contributions from every t. */
#pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *a = att + (((size_t)b * NH + h) * T + t) * T;
                const float *d = dout + ((size_t)b * T + t) * C + h * HS;
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * HS;
                float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * HS;
                const int t0 = t - position_of(pos, b, T, t);
                /* datt[t2] = d · v[t2]; dv[t2] += a[t2]·d; softmax backward: ds = a·(datt − Σ a·datt) */
                float dot = 0.0f;
                for (int t2 = t0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * HS;
                    float *dv = dqkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * HS;
                    float datt = 0.0f;
                    for (int i = 0; i < HS; i++) {
                        datt += d[i] * v[i];
                        dv[i] += a[t2] * d[i];
                    }
                    dot += a[t2] * datt;
                }
                for (int t2 = t0; t2 <= t; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * 3 * C + 2 * C + h * HS;
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    float *dk = dqkv + ((size_t)b * T + t2) * 3 * C + C + h * HS;
                    float datt = 0.0f;
                    for (int i = 0; i < HS; i++) datt += d[i] * v[i];
                    float ds = a[t2] * (datt - dot) * scale;
                    for (int i = 0; i < HS; i++) {
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
}

void gelu_forward_cpu(float *out, const float *inp, size_t N) {
    for (size_t i = 0; i < N; i++) out[i] = gelu_tanh(inp[i]);
}

void gelu_backward_cpu(float *dinp, const float *inp, const float *dout, size_t N) {
    for (size_t i = 0; i < N; i++) dinp[i] += gelu_tanh_grad(inp[i]) * dout[i];
}

void residual_forward_cpu(float *out, const float *a, const float *b, size_t N) {
    for (size_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}
