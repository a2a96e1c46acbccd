#!/usr/bin/env bash
# One H100: quack (Q=inputs/quack: 0.6.5 on CuTe DSL 4.7.1; Q=inputs/quack2: 0.6.4 on 4.6.2) beside
# our fused layer, three cuBLAS GEMMs and torch.compile, in one call. The DSL's CUDA 13 libraries
# (88 MB as a wheel) travel as an xz of the wheel's files in two parts, the first left in /tmp/qparts
# by an earlier call on the same warm machine; the other wheels in $Q/wheels. Needs
# build/bench_output_layer built beforehand; with build/kernel_trace.so, also our layer's kernels at
# the first shape, summed by name (CUPTI). SHAPES (d,N,V ...) and QCHUNK (quack's rows a chunk, 4096)
# may be given. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT
Q=${Q:-inputs/quack}; S=/tmp/site; rm -rf $S; SHAPES=${SHAPES:-4096,4096,128256 768,16384,262144 4096,16384,262144 1024,16384,151936}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $S $Q/wheels/*.whl \
    >$OUT/install.log 2>&1 || { cat $OUT/install.log; exit 1; }
cat /tmp/qparts/part_aa $Q/part_ab | xz -d | tar -xf - -C $S || { echo "the DSL's libraries did not unpack"; exit 1; }
export PYTHONPATH=$S:$S/nvidia_cutlass_dsl/dsl_packages  # what the DSL wheel's .pth adds in a site folder
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import quack, quack.linear_cross_entropy; print('quack', quack.__version__, 'imports')" 2>&1 | tail -3 | tee $OUT/import.txt
./build/bench_output_layer --no-canonical --no-streaming $(for s in $SHAPES; do echo --shape $s; done) >$OUT/ours.log 2>&1
echo "ours rc $?"
PYTHONUNBUFFERED=1 timeout 400 python3 dev/bench/bench_output_layer_torch.py --no-fwd --no-eager --peers --quack-chunk ${QCHUNK:-4096} --reps 10 $SHAPES \
    >$OUT/peers.log 2>&1
echo "peers rc $?"
head -n 8 $OUT/ours.log
if [ -f build/kernel_trace.so ]; then
  first=${SHAPES%% *}
  LD_LIBRARY_PATH=$PWD/inputs/lib:${LD_LIBRARY_PATH:-} CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so KERNEL_TRACE_OUT=$OUT/trace.csv \
      ./build/bench_output_layer --no-canonical --no-streaming --fb-only --reps 5 --shape $first >$OUT/traced.log 2>&1
  python3 - $OUT/trace.csv <<'PY'
import csv, sys, collections
tot, cnt = collections.Counter(), collections.Counter()
for r in csv.DictReader(open(sys.argv[1])):
    name = r["Name"].split("<")[0].split("(")[0][:60]
    tot[name] += int(r["Duration (ns)"]); cnt[name] += 1
all_ns = sum(tot.values())
for name, ns in tot.most_common(14):
    print(f"{ns / all_ns * 100:5.1f} %  {ns / cnt[name] / 1e3:9.1f} us x {cnt[name]:4d}  {name}")
PY
fi
grep -E '^peers|^torch|unavailable' $OUT/peers.log
