#!/usr/bin/env bash
# removal_probes.sh - bounds by removal: timing-only builds of the benchmarks with one part of a
# kernel taken out (their results are wrong; only their times mean anything). Built here from a
# patched git worktree of HEAD, run on the GPU machine:
#   bash dev/profile/removal_probes.sh build   # -> inputs/probe/: the binaries and this script
#   bash inputs/probe/removal_probes.sh run    # there (from the repository root): rounds, then a summary
# Variants of build/bench_output_layer (one chunk at each family's shape, forward + backward):
#   base            the code as it is
#   nostore         the tile kernel computes E and its sums but stores no E
#   nostore_random  the same, with E's buffer filled once with random values in [0, 1): the dH and
#                   dW products then read operands like the real ones instead of zeros, whose
#                   lower power lets them clock higher (so nostore alone bounds both effects)
#   noepi           the scaled exponentials' epilogue does nothing
# Variants of build/bench_kernels 16 attention (the forward's lines):
#   base, nosoftmax (P = S: no maxima, no exponentials, no sums)
# ROUNDS (2) alternating rounds.
set -uo pipefail
mode=${1:?build or run}
P=inputs/probe

if [ "$mode" = build ]; then
    root=$(git rev-parse --show-toplevel) || exit 1
    cd "$root" && mkdir -p $P && cp dev/profile/removal_probes.sh $P/
    wt=$(mktemp -d /tmp/removal_probes.XXXXXX)
    git worktree add -q --detach "$wt" HEAD || exit 1
    trap 'git -C "$root" worktree remove --force "$wt"' EXIT
    build() { # variant, target, patch names...
        local v=$1 target=$2; shift 2
        git -C "$wt" checkout -q -- kernels
        for p in "$@"; do python3 - "$wt" "$p" <<'EOF' || exit 1
import sys
wt, patch = sys.argv[1], sys.argv[2]
def edit(path, f):
    s = open(f"{wt}/{path}").read(); t = f(s)
    assert t != s, f"{patch}: {path} did not change"
    open(f"{wt}/{path}", "w").write(t)
def nostore(s):
    i = s.index("} else { /* MODE_EXP */"); j = s.index("if (MODE != MODE_DZ && t >= tile_col0", i)
    body = s[i:j].replace("scratch, out, row_in);", "scratch, out, false);")
    assert body.count("false);") == 3
    return s[:i] + body + s[j:]
def noepi(s):
    k = s.index("    const int64_t cbase = tile_col0 + (lane & 3) * 2;")
    return s[:k] + "    if (MODE == MODE_EXP) return;\n" + s[k:]
def random_fill(s):
    kernel = """/* removal probe: E's buffer filled once with values in [0, 1) */
static __global__ void probe_fill_kernel(__nv_bfloat16 *x, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned long long h = (i + 1) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 31; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 29;
        x[i] = __float2bfloat16((float)(h >> 40) * (1.0f / 16777216.0f));
    }
}

"""
    a = s.index("/* ---- the layer object")
    s = s[:a] + kernel + s[a:]
    old = "    L->ex = dev_alloc(s.ex);\n"
    new = old + "    if (s.ex) { probe_fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)L->ex, s.ex / 2); CUDA_CHECK(cudaDeviceSynchronize()); }\n"
    assert old in s
    return s.replace(old, new)
def nosoftmax(s):
    a = s.index("__device__ __forceinline__ void att_tma_softmax(")
    b = s.index("/* Ping-pong between the two consumer warpgroups")
    return s[:a] + """__device__ __forceinline__ void att_tma_softmax(float (&s)[2][32], float (&mrow)[2], float (&lrow)[2],
                                                float (&alpha)[2], float sl2) {
    alpha[0] = alpha[1] = 1.0f; mrow[0] = mrow[1] = 0.0f; lrow[0] = lrow[1] = 1.0f;
}

""" + s[b:]
{"nostore": lambda: edit("kernels/output_fused.cu", nostore),
 "noepi": lambda: edit("kernels/output_fused.cu", noepi),
 "random_fill": lambda: edit("kernels/output_layer.cu", random_fill),
 "nosoftmax": lambda: edit("kernels/attention_forward_tma.cuh", nosoftmax)}[patch]()
EOF
        done
        (cd "$wt" && make -j2 "build/$target" >"$wt/build_$v.log" 2>&1) || { tail -20 "$wt/build_$v.log"; exit 1; }
        cp "$wt/build/$target" "$P/${target}_$v"
        echo "built $P/${target}_$v"
    }
    (cd "$wt" && make deps >/dev/null 2>&1)
    build base bench_output_layer
    build nostore bench_output_layer nostore
    build nostore_random bench_output_layer nostore random_fill
    build noepi bench_output_layer noepi
    build base bench_kernels
    build nosoftmax bench_kernels nosoftmax
    exit 0
fi

[ "$mode" = run ] || { echo "usage: removal_probes.sh build|run" >&2; exit 2; }
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/removal_probes.txt; : >$S
shapes="--shape 1024,6554,151936 --shape 2048,8192,128256 --shape 768,4096,262144 --shape 640,8192,262144"
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $S
for r in $(seq 1 ${ROUNDS:-2}); do
    for v in base nostore nostore_random noepi; do
        echo "== output layer $v, round $r (d N V | 1 GEMM, 3 GEMMs | fused f+b ms, /3 GEMMs ...)" | tee -a $S
        timeout 120 $P/bench_output_layer_$v --no-canonical --no-streaming --reps 10 $shapes 2>&1 |
            grep -E "^ +[0-9]+ +[0-9]+ +[0-9]+ " | awk '!seen[$0]++' | tee -a $S
    done
    for v in base nosoftmax; do
        echo "== attention forward $v, round $r" | tee -a $S
        timeout 120 $P/bench_kernels_$v 16 attention 2>&1 | grep -E "^attention|forward wgmma" | tee -a $S
    done
done
