#!/usr/bin/env bash
# Two GPUs, the code with --pack bfd: the multi-GPU GPU tests; then prompt-completion pairs packed
# whole (--pack bfd) on one GPU and on two at the same global batch (step 1's loss, steps 1-20), two
# identical two-GPU runs (bitwise), and a two-GPU run resumed from its step 10 against the
# uninterrupted one. Needs ./train and build/run_gpu_tests. Summary last.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary_two.txt; : >$S
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS
G=2 TRAIN_PREBUILT=1 SECTIONS="tests" OUT=$OUT/mg timeout 300 bash dev/check/multigpu_check.sh >$OUT/multigpu.log 2>&1
echo "multigpu_check tests: rc $? [$((SECONDS - t0)) s]" | tee -a $S
cat $OUT/mg/summary.txt >>$S 2>/dev/null
M=/tmp/sft2; rm -rf $M; mkdir -p $M
python3 dev/check/make_pairs.py $M/pairs.jsonl 1
./train prepare --prompt-completion --tokenizer tests/fixtures/hf_llama3_bos.json -o $M/data $M/pairs.jsonl >$M/prepare.log 2>&1
V=$(grep -o 'vocabulary [0-9]*' $M/prepare.log | head -1 | cut -d' ' -f2)
common="--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --ffn-dim 256 --head-dim 64 -v $V -t 512 -d 4096 -x 20 -l 2e-3 --warmup 3 -s 0 --val-every 10 --val-batches 4 -n 10 --pack bfd -i $M/data/train.bin -j $M/data/val.bin --tokenizer $M/data/tokenizer.json"
./train $common -b 8 -o $M/one >$OUT/one_gpu.log 2>&1; r1=$?
./train $common -b 4 -g 2 -o $M/two >$OUT/two_gpus.log 2>&1; r2=$?
./train $common -b 4 -g 2 -o $M/again >$OUT/two_gpus_again.log 2>&1; r3=$?
mkdir -p $M/cut && cp -r $M/two/step_00000010 $M/cut/ && echo step_00000010 >$M/cut/latest
./train $common -b 4 -g 2 -y 1 -o $M/cut >$OUT/two_gpus_resumed.log 2>&1; r4=$?
line() { grep -E "^step +$2/" $1 | cut -d'|' -f2,5; }
echo "--pack bfd: one GPU -b 8 rc $r1, two GPUs -b 4 rc $r2, again rc $r3, resumed at 10 rc $r4; $(grep -m1 'packed best fit' $OUT/two_gpus.log)" | tee -a $S
for k in 1 2 10 20; do echo "  step $k: one GPU $(line $OUT/one_gpu.log $k) | two GPUs $(line $OUT/two_gpus.log $k)" | tee -a $S; done
same() { diff <(grep -E "^step +$3" $1 | cut -d'|' -f1-5) <(grep -E "^step +$3" $2 | cut -d'|' -f1-5) >/dev/null && echo equal || echo DIFFERENT; }
echo "  two identical two-GPU runs: loss lines $(same $OUT/two_gpus.log $OUT/two_gpus_again.log '[0-9]+/'), final weights $(cmp -s $M/two/step_00000020/model.safetensors $M/again/step_00000020/model.safetensors && echo equal || echo DIFFERENT)" | tee -a $S
echo "  resumed at step 10: steps 11-20 $(same $OUT/two_gpus.log $OUT/two_gpus_resumed.log '(1[1-9]|20)/'), final weights $(cmp -s $M/two/step_00000020/model.safetensors $M/cut/step_00000020/model.safetensors && echo equal || echo DIFFERENT)" | tee -a $S
echo "  val: one GPU $(grep 'val loss' $OUT/one_gpu.log | tail -1 | cut -d'|' -f2), two GPUs $(grep 'val loss' $OUT/two_gpus.log | tail -1 | cut -d'|' -f2)" | tee -a $S
echo "[$((SECONDS - t0)) s]" | tee -a $S
echo ===; cat $S
