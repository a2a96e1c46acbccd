/* model/cpu/output_layer_cpu.c - canonical and fused output layers, fp32 CPU reference.
 * Both compute each logit with the same dot product in the same order, so they differ only in how
 * the softmax statistics are gathered (two passes vs online); tests hold them to 1e-6. */
#include "model/cpu/output_layer_cpu.h"

#include <math.h>
#include <string.h>

/* Vocabulary columns per tile in the fused layer: the tile of logits is what would live in
 * registers on the GPU; here it just bounds the scratch on the stack. */
#define FUSED_TILE 64

int output_layer_count_valid(const int *targets, int N) {
    int n = 0;
    for (int i = 0; i < N; i++) n += targets[i] != -1;
    return n;
}

size_t output_layer_canonical_cpu_workspace(int N, int V) {
    return (size_t)N * V;
}

size_t output_layer_fused_cpu_workspace(int N) {
    return 2 * (size_t)N;
}

static double sum_rows(const float *losses, int N) {
    double total = 0.0;
    for (int n = 0; n < N; n++) total += losses[n];
    return total;
}

static inline float dot(const float *a, const float *b, int C) {
    float s = 0.0f;
    for (int i = 0; i < C; i++) s += a[i] * b[i];
    return s;
}

double output_layer_canonical_cpu(const OutputLayerCpu *a, float *logits) {
    const int N = a->N, C = a->C, V = a->V;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * V;
        const float *h = a->H + (size_t)n * C;
        for (int v = 0; v < V; v++) z[v] = dot(h, a->W + (size_t)v * C, C);
        int y = a->targets[n];
        if (y == -1) {
            a->losses[n] = 0.0f;
            continue;
        }
        float m = -INFINITY;
        for (int v = 0; v < V; v++) m = fmaxf(m, z[v]);
        double s = 0.0;
        for (int v = 0; v < V; v++) s += exp((double)z[v] - m);
        float lse = m + (float)log(s);
        a->losses[n] = lse - z[y];
        /* z becomes dlogits = grad_scale·(softmax − onehot) in place, as on the GPU. */
        for (int v = 0; v < V; v++) z[v] = a->grad_scale * (expf(z[v] - lse) - (v == y ? 1.0f : 0.0f));
    }
    double total = sum_rows(a->losses, N);
    if (!a->dH) return total;
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (a->targets[n] == -1) continue;
        const float *g = logits + (size_t)n * V;
        float *dh = a->dH + (size_t)n * C;
        for (int v = 0; v < V; v++) {
            const float *w = a->W + (size_t)v * C;
            for (int i = 0; i < C; i++) dh[i] += g[v] * w[i];
        }
    }
#pragma omp parallel for
    for (int v = 0; v < V; v++) {
        float *dw = a->dW + (size_t)v * C;
        for (int n = 0; n < N; n++) {
            if (a->targets[n] == -1) continue;
            float g = logits[(size_t)n * V + v];
            const float *h = a->H + (size_t)n * C;
            for (int i = 0; i < C; i++) dw[i] += g * h[i];
        }
    }
    return total;
}

void output_fused_row_stats_cpu(const OutputLayerCpu *a, int vocab_offset, int n, float *max, double *sum,
                                float *target_logit) {
    const int C = a->C, V = a->V;
    const int y = a->targets[n] - vocab_offset; /* in [0, V) only when the target is one of W's rows */
    const float *h = a->H + (size_t)n * C;
    float m = -INFINITY;
    double s = 0.0;
    float zt = 0.0f;
    float tile[FUSED_TILE];
    for (int v0 = 0; v0 < V; v0 += FUSED_TILE) {
        int width = V - v0 < FUSED_TILE ? V - v0 : FUSED_TILE;
        float tile_max = -INFINITY;
        for (int j = 0; j < width; j++) {
            tile[j] = dot(h, a->W + (size_t)(v0 + j) * C, C);
            tile_max = fmaxf(tile_max, tile[j]);
        }
        if (y >= v0 && y < v0 + width) zt = tile[y - v0];
        float m_new = fmaxf(m, tile_max);
        s *= exp((double)m - m_new); /* rescale the old sum to the new max */
        for (int j = 0; j < width; j++) s += exp((double)tile[j] - m_new);
        m = m_new;
    }
    *max = m;
    *sum = s;
    *target_logit = zt;
}

void output_fused_backward_cpu(const OutputLayerCpu *a, int vocab_offset, const float *lse) {
    const int N = a->N, C = a->C, V = a->V;
    /* Backward (Algorithm 2): recompute each logit from the saved lse; never store a row of P.
     * dH is owned by rows, dW by vocabulary entries, so both loops write without races. */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (a->targets[n] == -1) continue;
        int y = a->targets[n] - vocab_offset;
        const float *h = a->H + (size_t)n * C;
        float *dh = a->dH + (size_t)n * C;
        for (int v = 0; v < V; v++) {
            const float *w = a->W + (size_t)v * C;
            float g = a->grad_scale * (expf(dot(h, w, C) - lse[n]) - (v == y ? 1.0f : 0.0f));
            for (int i = 0; i < C; i++) dh[i] += g * w[i];
        }
    }
#pragma omp parallel for
    for (int v = 0; v < V; v++) {
        const float *w = a->W + (size_t)v * C;
        float *dw = a->dW + (size_t)v * C;
        for (int n = 0; n < N; n++) {
            if (a->targets[n] == -1) continue;
            int y = a->targets[n] - vocab_offset;
            const float *h = a->H + (size_t)n * C;
            float g = a->grad_scale * (expf(dot(h, w, C) - lse[n]) - (v == y ? 1.0f : 0.0f));
            for (int i = 0; i < C; i++) dw[i] += g * h[i];
        }
    }
}

double output_layer_fused_cpu(const OutputLayerCpu *a, float *row_stats) {
    const int N = a->N;
    float *lse = row_stats, *target_logit = row_stats + N;
    /* Forward (Algorithm 1): one sweep over vocabulary tiles per row, online softmax. */
#pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (a->targets[n] == -1) {
            a->losses[n] = 0.0f;
            lse[n] = 0.0f;
            target_logit[n] = 0.0f;
            continue;
        }
        float m;
        double s;
        output_fused_row_stats_cpu(a, 0, n, &m, &s, &target_logit[n]);
        lse[n] = m + (float)log(s);
        a->losses[n] = lse[n] - target_logit[n];
    }
    double total = sum_rows(a->losses, N);
    if (a->dH) output_fused_backward_cpu(a, 0, lse);
    return total;
}
