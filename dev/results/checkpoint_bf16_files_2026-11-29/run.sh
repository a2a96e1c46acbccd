#!/usr/bin/env bash
# Checkpoints that store bf16 values as bf16 (state.bin version 10, model.safetensors BF16 under
# --optimizer-state bf16) on one GPU, against the parent binary (inputs/train_parent) in the same call:
#   1. Qwen3-0.6B, B 8, T 2048, 30 steps, a checkpoint every 10, bf16 and fp32 AdamW state, parent
#      and new: each save's "written in" time, the checkpoint's bytes, the losses (the same bits:
#      nothing in a step changed);
#   2. the new binary resumed from its own bf16 checkpoint of step 20, and from the parent's
#      (version 9, fp32 arrays): steps 21-30 and the final weights against the uninterrupted runs;
#   3. Llama-3.2-1B, bf16 state, 10 steps and one checkpoint, parent and new;
#   4. dev/check/hf_families_check.py --device cuda: transformers loads the F32 and the BF16 exports.
# PARTS picks parts (default "1 2 3 4"; STATES the states of part 1, default "bf16 fp32"). Needs
# ./train, inputs/train_parent. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
nvidia-smi --query-gpu=index,name,driver_version,power.limit --format=csv,noheader | tee -a $S
t0=$SECONDS
PARTS=${PARTS:-1 2 3 4}; has() { [[ " $PARTS " == *" $1 "* ]]; }
C=/tmp/ck; rm -rf $C; mkdir -p $C
python3 tests/fixtures/gen/make_shard.py $C/rand.bin 3000000 151936 random 1 >/dev/null
python3 tests/fixtures/gen/make_shard.py $C/rand128k.bin 3000000 128256 random 1 >/dev/null
bin_of() { [ $1 = parent ] && echo inputs/train_parent || echo ./train; }
q3() { timeout 200 $(bin_of $1) -e qwen3-0.6b -b 8 -t 2048 --max-seq-len 2048 --warmup 2 --val-every 0 -s 0 -n 10 \
       --keep-checkpoints 3 -i $C/rand.bin "${@:2}"; }
sizes() { (cd $1 && stat -c '%n %s' state.bin model.safetensors | tr '\n' ' '; du -sb . | cut -f1); }
for st in ${STATES:-bf16 fp32}; do
  has 1 || break
  for b in parent new; do
    q3 $b -x 30 --optimizer-state $st -o $C/q3_${b}_$st >$OUT/q3_${b}_$st.log 2>&1
    echo "Qwen3-0.6B $st state, $b: rc $? [$((SECONDS - t0)) s]; step 30 files: $(sizes $C/q3_${b}_$st/step_00000030) bytes" | tee -a $S
    grep -E '^checkpoint:' $OUT/q3_${b}_$st.log | sed 's/^/    /' | tee -a $S
  done
  same=$(diff <(grep -E '^step ' $OUT/q3_parent_$st.log | cut -d'|' -f1-5) <(grep -E '^step ' $OUT/q3_new_$st.log | cut -d'|' -f1-5) >/dev/null && echo equal || echo DIFFERENT)
  echo "    $st: the 30 loss lines of parent and new $same; step 30 weights (values) $(python3 - $C/q3_parent_$st/step_00000030/model.safetensors $C/q3_new_$st/step_00000030/model.safetensors <<'PY'
import json, struct, sys, numpy as np
def load(p):
    b = open(p, "rb").read(); n = struct.unpack_from("<Q", b)[0]; h = json.loads(b[8:8 + n]); out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]; raw = b[8 + n + s:8 + n + e]
        out[k] = np.frombuffer(raw, np.float32) if v["dtype"] == "F32" else (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
print("equal" if a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a) else "DIFFERENT")
PY
)" | tee -a $S
  [ $st = bf16 ] || rm -rf $C/q3_*_$st  # the resumes below take the bf16 runs; a disk of 64 GB holds no more
done
for from in new parent; do
  has 2 || break
  rm -rf $C/q3_${from}_bf16/step_00000010
  R=$C/resume_from_$from; mkdir -p $R && mv $C/q3_${from}_bf16/step_00000020 $R/ && echo step_00000020 >$R/latest
  s1=$SECONDS; q3 new -x 30 --optimizer-state bf16 -y 1 -o $R >$OUT/q3_resumed_from_$from.log 2>&1; rc=$?
  same=$(diff <(grep -E '^step +(2[1-9]|30)/' $OUT/q3_${from}_bf16.log | cut -d'|' -f1-5) \
              <(grep -E '^step +(2[1-9]|30)/' $OUT/q3_resumed_from_$from.log | cut -d'|' -f1-5) >/dev/null &&
         [ $(grep -cE '^step +(2[1-9]|30)/' $OUT/q3_resumed_from_$from.log) = 10 ] && echo equal || echo DIFFERENT)
  echo "new binary resumed from the $from's bf16 step 20: rc $rc in $((SECONDS - s1)) s; steps 21-30 $same; final state.bin $(cmp -s $C/q3_new_bf16/step_00000030/state.bin $R/step_00000030/state.bin && echo 'equal to the new run'\''s' || echo DIFFERENT)" | tee -a $S
  grep -E '^resumed|^checkpoint:' $OUT/q3_resumed_from_$from.log | head -3 | sed 's/^/    /' | tee -a $S
done
rm -rf $C/q3_* $C/resume_from_*
for b in parent new; do
  has 3 || break
  timeout 200 $(bin_of $b) -e llama3.2-1b -b 4 -t 2048 --max-seq-len 2048 --warmup 2 --val-every 0 -s 0 -x 10 -n 10 \
      --optimizer-state bf16 -i $C/rand128k.bin -o $C/l1_$b >$OUT/l1_$b.log 2>&1
  echo "Llama-3.2-1B bf16 state, $b: rc $? [$((SECONDS - t0)) s]; files: $(sizes $C/l1_$b/step_00000010) bytes" | tee -a $S
  grep -E '^checkpoint:' $OUT/l1_$b.log | sed 's/^/    /' | tee -a $S
  rm -rf $C/l1_$b
done
if has 4; then
  timeout 300 python3 dev/check/hf_families_check.py --train ./train --device cuda >$OUT/hf_families.log 2>&1
  echo "hf_families_check --device cuda: rc $? [$((SECONDS - t0)) s]: $(tail -1 $OUT/hf_families.log)" | tee -a $S
  grep -E 'export|FAILED' $OUT/hf_families.log | sed 's/^/    /' | tee -a $S
fi
rm -rf $C
echo ===; cat $S
