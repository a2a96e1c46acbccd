#!/usr/bin/env bash
# Four GPUs, current main: multi-GPU tests, equivalence, bitwise, vocab-parallel and families at G=4;
# the transformers check (fp32, CPU side) in the background.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT /tmp/f
S=$OUT/summary_x4a.txt
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee $S
nvidia-smi topo -m >$OUT/topo.txt 2>&1
( timeout 400 python3 dev/check/hf_families_check.py --train ./train >$OUT/hf_check.log 2>&1; echo "rc $?" >>$OUT/hf_check.log ) &
hf=$!
mg() { G=4 TRAIN_PREBUILT=1 SECTIONS="$1" OUT=$OUT/mg_$2 timeout $3 bash dev/check/multigpu_check.sh >$OUT/multigpu_$2.log 2>&1
  echo "== multigpu G=4 $1 (rc $?)" >>$S; sed -n '/==== summary ====/,$p' $OUT/multigpu_$2.log >>$S; }
mg "tests correct bitwise" a 230
mg vocabpar vp 140
mg families fam 150
wait $hf
echo "== hf_families_check (fp32, CPU)" >>$S; tail -25 $OUT/hf_check.log >>$S
cp /tmp/mg/*.log $OUT/ 2>/dev/null
echo "==== summary"; cat $S
