#!/bin/bash
# dev/output_layer_sweep.sh - one device call (issue 5): sweep the fused backward's chunk x window
# structure (FUSEDGPT_OUTL_DZ_MB = dZ window budget in MiB, FUSEDGPT_OUTL_CHUNK_ROWS = most rows per
# chunk; kernels/output_fused.cu) against the defaults and torch.compile in the same run.
#   bash dev/output_layer_sweep.sh          (from the repository root; logs in $OUT, or ./out)
# Steps, each under timeout: build (~30 s); GPU tests of the output layer at two non-default
# structures (correctness must not depend on them); the sweep (fused fwd+bwd only, 3 warm-ups +
# median of 5, one process per setting, all three shapes, ~5 s per setting); the default again
# (drift); torch.compile and eager fwd+bwd at the three shapes (TORCH_TIMEOUT, default 135 s, most of
# it compiling); a short table last. Stays under 6 minutes on an H100: the sweep starts no new
# setting after SWEEP_DEADLINE seconds from the start (default 200).
set -o pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT"
T0=$SECONDS
say() { echo "[$((SECONDS - T0)) s] $*"; }
SWEEP_DEADLINE=${SWEEP_DEADLINE:-200}
TORCH_TIMEOUT=${TORCH_TIMEOUT:-200}
# Liger-Kernel and Cut Cross-Entropy are not in the device image: when their wheels were fetched
# here into .whl/ (pip download --no-deps liger-kernel cut-cross-entropy, see the device README)
# and carried, they are installed for the PyTorch step, which then times them too (--peers).
PEERS=()
if ls .whl/*.whl >/dev/null 2>&1 &&
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl; then
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    PEERS=(--peers)
fi
SHAPES=(768,65536,262144 768,16384,262144 4096,16384,262144)
# (dZ MiB : chunk rows), most informative first in case the deadline cuts the list. Window columns
# = dZ / (rows x 2 B): at rows 4096, 8 MiB -> 1024 columns, 16 -> 2048, 32 -> 4096, 44 -> 5632 (6 x 22
# = 132 tiles of 128 x 256 in a d=768 dW GEMM); the defaults are 128 MiB, 8192 rows (8192 columns)
# at d=768 when the logits would be >= 1.5 GiB (the first two shapes), else 64 MiB, 4096 rows, and
# 2048 rows at d=4096 (32 MiB dH budget; 16384 columns). Setting any of them drops the square
# default (64:4096 is the old d=768 default). Windows under 1024 columns
# are left out (thousands of small GEMMs). SWEEP_SETTINGS="dz:rows[:lt] ..." replaces the list (lt:
# cuBLASLt's scratch in MiB, FUSEDGPT_OUTL_LT_MB; default 1).
SETTINGS=(16:4096 32:4096 8:4096 128:8192 64:16384 256:16384 32:8192 64:8192 128:16384 32:16384 24:4096
    44:4096 128:4096 16:8192 16:2048 64:2048)
[ -n "${SWEEP_SETTINGS:-}" ] && read -r -a SETTINGS <<<"$SWEEP_SETTINGS"

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader \
    | tee "$OUT/gpu.txt"

# ---- build (as dev/output_layer_device.sh: make, or the output layer's own objects when a file
# in progress elsewhere breaks the whole tree's link) ----
say "build"
if timeout -k 10 300 make -j16 build/run_gpu_tests build/bench_output_layer >"$OUT/build.log" 2>&1; then
    TESTS=./build/run_gpu_tests BENCH=./build/bench_output_layer
else
    echo "(make failed, see build.log tail below; building the output layer alone)"
    tail -5 "$OUT/build.log"
    B=build/ol
    mkdir -p $B
    NVF="-O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
    for f in kernels/output_layer kernels/output_fused kernels/output_canonical tests/test_output_layer_gpu \
        dev/bench_output_layer; do
        timeout -k 10 300 nvcc $NVF -c $f.cu -o $B/$(basename $f).o &
    done
    gcc -std=c11 -O3 -D_GNU_SOURCE -I. -c tests/runner.c -o $B/runner.o
    wait
    nvcc -gencode arch=compute_90a,code=sm_90a -o $B/run_gpu_tests $B/test_output_layer_gpu.o $B/runner.o \
        $B/output_layer.o $B/output_fused.o $B/output_canonical.o -lcublasLt -lcublas || exit 1
    nvcc -gencode arch=compute_90a,code=sm_90a -o $B/bench_output_layer $B/bench_output_layer.o \
        $B/output_layer.o $B/output_fused.o $B/output_canonical.o -lcublasLt -lcublas || exit 1
    TESTS=$B/run_gpu_tests BENCH=$B/bench_output_layer
fi

# ---- correctness at structures the defaults never produce ----
# dZ 8 MiB, 8192 rows: the test shapes get one chunk and windows of 512-768 columns (the default
# gives 8192); dZ 2 MiB, 1024 rows: the 4097-row test runs 5 chunks x 129 windows.
say "tests: FUSEDGPT_OUTL_DZ_MB=8 FUSEDGPT_OUTL_CHUNK_ROWS=8192 run_gpu_tests output"
FUSEDGPT_OUTL_DZ_MB=8 FUSEDGPT_OUTL_CHUNK_ROWS=8192 timeout -k 10 240 $TESTS output >"$OUT/tests_dz8_rows8192.log" 2>&1
TESTS_RC1=$?
say "tests: FUSEDGPT_OUTL_DZ_MB=2 FUSEDGPT_OUTL_CHUNK_ROWS=1024 run_gpu_tests many_chunks"
FUSEDGPT_OUTL_DZ_MB=2 FUSEDGPT_OUTL_CHUNK_ROWS=1024 timeout -k 10 120 $TESTS many_chunks \
    >"$OUT/tests_dz2_rows1024.log" 2>&1
TESTS_RC2=$?
grep -E "FAILED|passed" "$OUT/tests_dz8_rows8192.log" "$OUT/tests_dz2_rows1024.log"

# ---- the sweep ----
SHAPE_ARGS=()
for s in "${SHAPES[@]}"; do SHAPE_ARGS+=(--shape "$s"); done
: >"$OUT/sweep.csv"
run_setting() { # tag dz_mb rows [lt_mb] (empty: the default)
    local tag=$1 log="$OUT/sweep_$1.log"
    if [ -n "$2" ]; then
        FUSEDGPT_OUTL_DZ_MB=$2 FUSEDGPT_OUTL_CHUNK_ROWS=$3 FUSEDGPT_OUTL_LT_MB=${4:-1} timeout -k 10 90 $BENCH \
            --fb-only --reps 5 "${SHAPE_ARGS[@]}" >"$log" 2>&1
    else
        timeout -k 10 90 $BENCH --fb-only --reps 5 "${SHAPE_ARGS[@]}" >"$log" 2>&1
    fi
    local rc=$?
    # structure the library printed (one line per created layer), then the CSV rows
    grep '^output layer: FUSEDGPT_OUTL' "$log" | sed "s/^/struct,$tag,/" >>"$OUT/sweep.csv"
    grep '^csv,[0-9]' "$log" | sed "s/^csv,/sweep,$tag,/" >>"$OUT/sweep.csv"
    say "$tag: rc $rc, fwd+bwd ms $(grep '^csv,[0-9]' "$log" | cut -d, -f2-4,9 | tr '\n' ' ')"
}
run_setting default
for st in "${SETTINGS[@]}"; do
    if [ $((SECONDS - T0)) -ge "$SWEEP_DEADLINE" ]; then
        say "SWEEP_DEADLINE ${SWEEP_DEADLINE} s reached: settings from $st on not run"
        break
    fi
    IFS=: read -r dz rows lt <<<"$st"
    run_setting "dz${dz}_rows${rows}${lt:+_lt$lt}" "$dz" "$rows" "$lt"
done
run_setting default_again
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv,noheader | tee -a "$OUT/gpu.txt"

# ---- PyTorch in the same run (static-shape torch.compile and eager, fwd+bwd; the headline shape
# first, each line printed as it finishes so that a timeout keeps the earlier ones) ----
say "torch: python3 dev/bench_output_layer_torch.py --no-fwd ${PEERS[*]} ${SHAPES[*]}"
[ "${TORCH:-1}" = 0 ] && TORCH_TIMEOUT=0 # TORCH=0: peers measured in an earlier run
[ "$TORCH_TIMEOUT" -gt 0 ] && timeout -k 10 "$TORCH_TIMEOUT" python3 dev/bench_output_layer_torch.py --no-fwd "${PEERS[@]}" "${SHAPES[@]}" \
    >"$OUT/torch.log" 2>&1
echo "(torch rc $?)"
grep -E "^torch|^peer|Error" "$OUT/torch.log" | head -12

# ---- table ----
python3 - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import math, re, sys
out = sys.argv[1]
ms, mb, struct, order = {}, {}, {}, []
for line in open(f"{out}/sweep.csv"):
    f = line.rstrip("\n").split(",")
    if f[0] == "sweep":
        tag, key = f[1], (int(f[2]), int(f[3]), int(f[4]))
        ms[(key, tag)], mb[(key, tag)] = float(f[9]), float(f[15])
        if tag not in order: order.append(tag)
    elif f[0] == "struct":
        m = re.search(r"chunks <= (\d+) rows x windows <= (\d+) columns.* at d=(\d+) max_N=(\d+) V=(\d+)", line)
        if m: struct[((int(m[3]), int(m[4]), int(m[5])), f[1])] = f"{m[1]}x{m[2]}"
torch = {}
try:
    for line in open(f"{out}/torch.log"):
        if line.startswith("csv_torch,") and line[10].isdigit():
            f = line.split(",")
            torch[(int(f[1]), int(f[2]), int(f[3]))] = (float(f[5]), float(f[7]))
except OSError:
    pass
shapes = []
for (key, tag) in ms:
    if key not in shapes: shapes.append(key)
full = open(f"{out}/sweep_table.txt", "w")
def emit(s, short):
    if short: print(s)
    full.write(s + "\n")
def default_struct(key):  # kernels/output_fused.cu's outl_fused_sizes, for a label
    d, n, v = key
    if d <= 1024 and n * v * 2 >= 2 << 30: return "8192x8192"
    return "4096x8192" if d <= 1024 else "2048x16384"
hdr = f"{'d,N,V':>18} {'setting':>16} {'rows x cols':>11} {'fwd+bwd ms':>10} {'vs default':>10} {'vs compile':>10} {'MB':>5}"
print("== output layer sweep: fused fwd+bwd (median of 5) by backward structure; full list in sweep_table.txt")
print("   rows x cols = caps on chunk rows and window columns (default: 8192x8192 at d<=1024 when N x V x 2 B >= 1.5 GiB, else 4096x8192; 2048x16384 at d=4096)")
emit(hdr, True)
for key in shapes:
    defs = [ms[(key, t)] for t in ("default", "default_again") if (key, t) in ms and not math.isnan(ms[(key, t)])]
    base = sum(defs) / len(defs) if defs else math.nan
    tc, te = torch.get(key, (math.nan, math.nan))
    name = ",".join(map(str, key))
    rows = sorted(((ms[(key, t)], t) for t in order if (key, t) in ms), key=lambda x: (math.isnan(x[0]), x[0]))
    best = [r for r in rows if not r[1].startswith("default")]
    shown = set(t for _, t in best[:4]) | ({best[-1][1]} if best else set()) | {"default", "default_again"}
    for v, t in rows:
        st = struct.get((key, t), default_struct(key) if t.startswith("default") else "?")
        emit(f"{name:>18} {t:>16} {st:>11} {v:10.2f} {v / base:10.3f} {v / tc:10.3f} {mb[(key, t)]:5.0f}",
             t in shown)
    emit(f"{name:>18} {'torch.compile':>16} {'':>11} {tc:10.2f} {tc / base:10.3f} {1.0:10.3f}", True)
    note = "   (nan: out of memory or not run)" if math.isnan(te) else ""
    emit(f"{name:>18} {'torch eager':>16} {'':>11} {te:10.2f} {te / base:10.3f} {te / tc:10.3f}{note}", True)
EOF
echo "== tests at non-default structures: $(tail -1 "$OUT/tests_dz8_rows8192.log") (rc $TESTS_RC1);" \
    "$(tail -1 "$OUT/tests_dz2_rows1024.log") (rc $TESTS_RC2)"
say "done"
