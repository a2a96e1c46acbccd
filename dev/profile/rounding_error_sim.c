/* rounding_error_sim.c - how far a correct output layer's dH and dW may fall from the fp64
 * reference on the GPU tests' inputs, from the roundings each design makes, simulated on the CPU.
 * It backs the few-row tolerances of tests/test_output_layer_gpu.cu: with a handful of counted
 * rows the relative L2 error is not an average, and a correct layer can exceed 2e-3.
 *
 *   gcc -O2 -o /tmp/rounding_error_sim dev/profile/rounding_error_sim.c -lm
 *   /tmp/rounding_error_sim fused|fused_exact_target|canonical N V d logit_std ignore_frac draws [tol [first_draw]]
 *   e.g. /tmp/rounding_error_sim fused 7 1000 128 2.0 0.3 16000 2e-3
 *
 * Inputs as in the tests (H ~ N(0,1), W ~ N(0, logit_std^2/d), both rounded to bf16; targets
 * uniform, a fraction ignored; mean loss). Roundings simulated:
 *   fused:     logits and softmax in fp32, dZ = p - onehot rounded to bf16, products summed in
 *              double (the GPU's fp32 accumulation adds far less than the bf16 roundings), dH
 *              rounded to bf16, dW kept in fp32;
 *   fused_exact_target: the same, but dH gets each row's target entry p - 1 unrounded, as a layer
 *              would that added the residual (p - 1) - bf16(p - 1) back in fp32 (not built: what
 *              that would buy);
 *   canonical: logits rounded to bf16 first (llm.c), then as fused.
 * Prints, per quantity, how many draws exceed the tolerance and the largest error seen. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;

static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(void) { return ((next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static double normal(void) { return sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 * uniform01()); }

static float round_bf16(float x) { /* round to nearest even, as __float2bfloat16_rn */
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    float y;
    memcpy(&y, &u, 4);
    return y;
}

static double rel_l2(const double *got, const double *ref, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) e += (got[i] - ref[i]) * (got[i] - ref[i]), s += ref[i] * ref[i];
    return s > 0 ? sqrt(e / s) : sqrt(e);
}

int main(int argc, char **argv) {
    if (argc < 8) {
        fprintf(stderr,
                "usage: %s fused|fused_exact_target|canonical N V d logit_std ignore_frac draws [tol [first_draw]]\n",
                argv[0]);
        return 2;
    }
    const int canonical = strcmp(argv[1], "canonical") == 0, exact_target = strcmp(argv[1], "fused_exact_target") == 0;
    if (!canonical && !exact_target && strcmp(argv[1], "fused") != 0) {
        fprintf(stderr, "error: the layer is fused, fused_exact_target or canonical, got '%s'\n", argv[1]);
        return 2;
    }
    const int N = atoi(argv[2]), V = atoi(argv[3]), d = atoi(argv[4]), draws = atoi(argv[7]);
    const double logit_std = atof(argv[5]), ignore_frac = atof(argv[6]);
    const double tol = argc > 8 ? atof(argv[8]) : 2e-3;
    const int first_draw = argc > 9 ? atoi(argv[9]) : 0; /* draws are numbered: disjoint runs in parallel */
    if (N < 1 || V < 1 || d < 1 || draws < 1) {
        fprintf(stderr, "error: N, V, d and draws must be positive\n");
        return 2;
    }
    double *H = malloc(sizeof *H * N * d), *W = malloc(sizeof *W * V * d);
    double *z = malloc(sizeof *z * V), *zr = malloc(sizeof *zr * V);
    double *dH_ref = malloc(sizeof *dH_ref * N * d), *dH = malloc(sizeof *dH * N * d);
    double *dW_ref = malloc(sizeof *dW_ref * V * d), *dW = malloc(sizeof *dW * V * d);
    int *target = malloc(sizeof *target * N);
    if (!H || !W || !z || !zr || !dH_ref || !dH || !dW_ref || !dW || !target) {
        fprintf(stderr, "error: out of memory\n");
        return 1;
    }
    int over_dH = 0, over_dW = 0;
    double max_dH = 0, max_dW = 0, sum_dH = 0;
    for (int draw = 0; draw < draws; draw++) {
        rng_state = 987654321ull + (uint64_t)(first_draw + draw) * 7919u;
        for (size_t i = 0; i < (size_t)N * d; i++) H[i] = round_bf16((float)normal());
        for (size_t i = 0; i < (size_t)V * d; i++) W[i] = round_bf16((float)(normal() * logit_std / sqrt(d)));
        int counted = 0;
        for (int n = 0; n < N; n++) {
            target[n] = uniform01() < ignore_frac ? -1 : (int)(next_u64() % (uint64_t)V);
            counted += target[n] >= 0;
        }
        const double scale = 1.0 / (counted ? counted : 1);
        memset(dH_ref, 0, sizeof *dH_ref * N * d), memset(dH, 0, sizeof *dH * N * d);
        memset(dW_ref, 0, sizeof *dW_ref * V * d), memset(dW, 0, sizeof *dW * V * d);
        for (int n = 0; n < N; n++) {
            const int t = target[n];
            if (t < 0) continue;
            double m = -INFINITY, mr = -INFINITY;
            for (int v = 0; v < V; v++) {
                double s = 0;
                for (int k = 0; k < d; k++) s += H[(size_t)n * d + k] * W[(size_t)v * d + k];
                z[v] = s;
                zr[v] = canonical ? round_bf16((float)s) : (float)s;
                m = fmax(m, z[v]), mr = fmax(mr, zr[v]);
            }
            double se = 0, ser = 0;
            for (int v = 0; v < V; v++) se += exp(z[v] - m), ser += exp(zr[v] - mr);
            const double lse = m + log(se);
            const float lse_r = (float)(mr + log(ser));
            for (int v = 0; v < V; v++) {
                const double g = (exp(z[v] - lse) - (v == t)) * scale;
                const float p = (float)exp(zr[v] - lse_r);
                const double gr = round_bf16(p - (v == t ? 1.0f : 0.0f)) * scale;
                const double gr_dH = exact_target && v == t ? (double)(p - 1.0f) * scale : gr;
                for (int k = 0; k < d; k++) {
                    dH_ref[(size_t)n * d + k] += g * W[(size_t)v * d + k];
                    dH[(size_t)n * d + k] += gr_dH * W[(size_t)v * d + k];
                    dW_ref[(size_t)v * d + k] += g * H[(size_t)n * d + k];
                    dW[(size_t)v * d + k] += gr * H[(size_t)n * d + k];
                }
            }
        }
        for (size_t i = 0; i < (size_t)N * d; i++) dH[i] = round_bf16((float)dH[i]);
        const double e_dH = rel_l2(dH, dH_ref, (size_t)N * d), e_dW = rel_l2(dW, dW_ref, (size_t)V * d);
        over_dH += e_dH > tol, over_dW += e_dW > tol;
        max_dH = fmax(max_dH, e_dH), max_dW = fmax(max_dW, e_dW), sum_dH += e_dH;
    }
    printf("%s N=%d V=%d d=%d logit_std=%g ignored=%g: over %g in dH %d, dW %d of %d draws; largest dH %.3g, "
           "dW %.3g; mean dH %.3g\n",
           argv[1], N, V, d, logit_std, ignore_frac, tol, over_dH, over_dW, draws, max_dH, max_dW, sum_dH / draws);
    return 0;
}
