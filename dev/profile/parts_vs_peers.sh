#!/usr/bin/env bash
# parts_vs_peers.sh - one GPU: where a training step's time goes, ./train against PyTorch + Liger
# eager in bf16 (the best PyTorch stack of dev/RESULTS.md's family entries), kernel by kernel on the
# same GPU in the same call. Both processes run under the same CUPTI probe (build/kernel_trace.so,
# dev/profile/kernel_trace.c), so both are timed at the clocks of training; the peer opens each
# step with torch.cuda._sleep (kernel spin_kernel) to mark it. dev/profile/timeline_gaps.py sums
# each run's last 5 whole steps by part (GEMMs, attention, norms, ...) and lists its longest GEMM
# kernels; a table of the parts side by side comes last.
#   [MODELS="qwen3-0.6b llama3.2-1b"] [B=16] [EXTRA="--optimizer-state bf16"] [PEERS=0] [OUT=out] bash dev/profile/parts_vs_peers.sh
# PEERS=0 traces ./train alone.
# Needs ./train, build/kernel_trace.so (make build/kernel_trace.so), CUPTI, PyTorch with
# transformers, and Liger's wheel in .whl/ when it is not installed.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/parts.txt; M=/tmp/pvp; mkdir -p $M
[ -f build/kernel_trace.so ] || { echo "build/kernel_trace.so is missing: make build/kernel_trace.so" | tee -a $S; exit 1; }
CK=/dev/shm/pvp; [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 30000000 ] 2>/dev/null || CK=$M/run
B=${B:-16}; EXTRA=${EXTRA---optimizer-state bf16}  # EXTRA="" runs the default fp32 state
probe() { CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so KERNEL_TRACE_OUT=$1 "${@:2}"; }
for m in ${MODELS:-qwen3-0.6b llama3.2-1b}; do
  V=$(python3 -c "import sys; sys.path.insert(0, 'dev/bench'); import bench_family_torch as b; print(b.MODELS['$m']['vocab_size'])")
  [ -f $M/data_$V.bin ] || python3 tests/fixtures/gen/make_shard.py $M/data_$V.bin 4000000 $V random 3 >/dev/null
  rm -rf $CK
  probe $M/ours_$m.csv timeout 200 ./train -e $m -b $B -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 \
      -s 0 $EXTRA -i $M/data_$V.bin -o $CK >$OUT/ours_$m.log 2>&1
  echo "ours $m B $B: $(grep '| loss' $OUT/ours_$m.log | tail -1 | cut -c1-150) $(grep -m1 -i error $OUT/ours_$m.log)" | tee -a $S
  python3 dev/profile/timeline_gaps.py $M/ours_$m.csv --steps 5 --categories --gemms 14 --csv-tag ours_$m >>$S 2>&1
  [ "${PEERS:-1}" = 0 ] && { gzip -c $M/ours_$m.csv >$OUT/ours_${m}_trace.csv.gz; continue; }
  probe $M/liger_$m.csv timeout 300 python3 dev/bench/bench_family_torch.py --model $m --stack liger --batch $B \
      --precision bf16 --steps 7 --warmup 3 --mark-steps >$OUT/liger_$m.log 2>&1
  echo "liger $m B $B: $(grep csv_ $OUT/liger_$m.log)" | tee -a $S
  python3 dev/profile/timeline_gaps.py $M/liger_$m.csv --steps 5 --marker spin_kernel --categories --gemms 14 \
      --csv-tag liger_$m >>$S 2>&1
  gzip -c $M/ours_$m.csv >$OUT/ours_${m}_trace.csv.gz; gzip -c $M/liger_$m.csv >$OUT/liger_${m}_trace.csv.gz
done
rm -rf $CK
python3 - $S <<'PY' | tee -a $S
import collections, sys
ms = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    if line.startswith("csv_part,"):
        head, v = line.rstrip("\n").rsplit(",", 1); _, tag, part = head.split(",", 2)
        ms[tag][part] = float(v)
for m in sorted({t.split("_", 1)[1] for t in ms}):
    ours, peer = ms.get("ours_" + m, {}), ms.get("liger_" + m, {})
    print(f"\n{m}: ms a step at training clocks | ./train | Liger eager bf16 | difference")
    for p in sorted(set(ours) | set(peer), key=lambda p: -max(ours.get(p, 0), peer.get(p, 0))):
        o, l = ours.get(p, 0.0), peer.get(p, 0.0)
        print(f"| {p} | {o:.1f} | {l:.1f} | {o - l:+.1f} |")
PY
