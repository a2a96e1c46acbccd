#!/usr/bin/env bash
# One GPU, the code with eval over a pattern of shards, the loader's window order in 4 bytes and
# --query-pre-attn-scalar: every GPU test, transformers against our checkpoints both ways and the
# GPT-2 round trip (dev/results/closing_checks_2026-11-28_b/run.sh); the tiny runs' lines and final
# weights against the parent binary (BASE, default inputs/base_train; dev/check/ab_one_gpu.sh
# without its throughput rounds); then ./train eval on the GPU of one tiny run's checkpoint over two
# shards one by one and as a pattern (the pattern's mean against the shards' weighted by their
# targets, and its --per-token file against theirs one after the other), and a Gemma 3 with
# --query-pre-attn-scalar 168 through transformers. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_eval.txt; : >$S
BASE=${BASE:-inputs/base_train}
OUT=$OUT bash dev/results/closing_checks_2026-11-28_b/run.sh >$OUT/closing.log 2>&1
BASE=$BASE TESTS=adamw THROUGHPUT=0 OUT=$OUT/ab bash dev/check/ab_one_gpu.sh >$OUT/ab.log 2>&1
E=/tmp/evp; rm -rf $E; mkdir -p $E/set
python3 tests/fixtures/gen/make_shard.py $E/set/val_a.bin 300001 1000 pattern 7 >/dev/null
python3 tests/fixtures/gen/make_shard.py $E/set/val_b.bin 123457 1000 pattern 8 >/dev/null
ck=$(ls -d /tmp/ad/sb_gpt2_new/step_* | tail -1)
for k in a b; do ./train eval --init-from $ck -i $E/set/val_$k.bin -t 128 -b 8 --per-token $E/per_$k.f32 >$OUT/eval_$k.log 2>&1; done
./train eval --init-from $ck -i "$E/set/val_*.bin" -t 128 -b 8 --per-token $E/per_both.f32 >$OUT/eval_both.log 2>&1
echo "eval rc: $(tail -1 $OUT/eval_a.log) | $(tail -1 $OUT/eval_b.log) | $(tail -1 $OUT/eval_both.log)" | tee -a $S
python3 - $OUT $E <<'PY' | tee -a $S
import sys, numpy as np
out, e = sys.argv[1], sys.argv[2]
last = lambda f: open(f"{out}/{f}").read().strip().splitlines()[-1].split()
a, b, both = last("eval_a.log"), last("eval_b.log"), last("eval_both.log")
la, na, lb, nb, lab, nab = float(a[1]), int(a[5]), float(b[1]), int(b[5]), float(both[1]), int(both[5])
want = (la * na + lb * nb) / (na + nb)
pa, pb, pab = (np.fromfile(f"{e}/per_{k}.f32", dtype="<f4") for k in ("a", "b", "both"))
same = pab.size == pa.size + pb.size and np.array_equal(pab, np.concatenate([pa, pb]))
mean = float(np.concatenate([pa, pb]).astype(np.float64).mean())
ok = nab == na + nb and abs(lab - want) <= 2e-6 and same and abs(mean - lab) <= 2e-6
print(f"eval over a pattern on the GPU: {lab:.6f} over {nab} targets; the shards weighted {want:.6f} ({na} + {nb}); "
      f"--per-token {'the two files one after the other' if same else 'DIFFERENT'}, its mean {mean:.6f}: {'ok' if ok else 'FAILED'}")
PY
grep -h "^shard " $OUT/eval_both.log | tee -a $S
# Gemma 3 with Gemma 3 27B's query_pre_attn_scalar from scratch: our eval against transformers on its export
python3 tests/fixtures/gen/make_shard.py $E/g.bin 300000 1000 pattern 3 >/dev/null
python3 tests/fixtures/gen/make_shard.py $E/g_val.bin 129 1000 pattern 4 >/dev/null
./train --family gemma3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256 --query-pre-attn-scalar 168 \
    -v 1000 -b 8 -t 128 -x 20 -l 2e-3 --warmup 5 --val-every 0 -s 0 -i $E/g.bin -o $E/gemma >$OUT/gemma_train.log 2>&1
echo "gemma3 --query-pre-attn-scalar 168: rc $? $(grep -m1 '^gemma3:' $OUT/gemma_train.log)" | tee -a $S
./train eval --init-from $E/gemma/step_00000020 -i $E/g_val.bin -t 128 >$OUT/gemma_eval.log 2>&1
python3 - $E $(tail -1 $OUT/gemma_eval.log | awk '{print $2}') <<'PY' 2>$OUT/gemma_hf.err | tee -a $S
import sys, json, numpy as np, torch
from transformers import AutoModelForCausalLM
e, ours = sys.argv[1], float(sys.argv[2])
ck = f"{e}/gemma/step_00000020"
scalar = json.load(open(f"{ck}/config.json"))["query_pre_attn_scalar"]
ids = torch.tensor(np.fromfile(f"{e}/g_val.bin", dtype="<u2", offset=64).astype(np.int64))[None]
m = AutoModelForCausalLM.from_pretrained(ck, torch_dtype=torch.float32, attn_implementation="eager").eval()
with torch.no_grad():
    theirs = float(m(ids, labels=ids).loss)
ok = abs(theirs - ours) <= 2e-3 * abs(theirs)
print(f"gemma3 query_pre_attn_scalar {scalar} in config.json: transformers {theirs:.6f}, ./train eval on the GPU {ours:.6f}: {'ok' if ok else 'FAILED'}")
PY
echo ===; cat $OUT/summary.txt $OUT/ab/summary.txt $S
