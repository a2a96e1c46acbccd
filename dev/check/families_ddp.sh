#!/usr/bin/env bash
# families_ddp.sh - G GPUs of one host: a model family on one GPU and data-parallel on G (./train -g G,
# its default mode), beside PyTorch + transformers with Liger eager in bf16 on one GPU and under DDP on
# G, then torch.compile on one GPU and under DDP at COMPILE_B while time is left. T 2048, random
# tokens, B sequences per GPU; ours: median tokens/s of the last 8 of 14 steps. Summary last.
#   MODEL=qwen3-0.6b B=16 [G=2] [STATES="bf16 fp32"] [COMPILE_B=8] [BUDGET_S=520] [OUT=out] bash dev/check/families_ddp.sh
# Needs ./train built and, for the peers, PyTorch, transformers and Liger's wheel in .whl/.
OUT=${OUT:-out}; mkdir -p $OUT; S=$OUT/summary.txt; : >$S
MODEL=${MODEL:-qwen3-0.6b} B=${B:-16} G=${G:-2} COMPILE_B=${COMPILE_B:-8} BUDGET_S=${BUDGET_S:-520}
say() { echo "$1" | tee -a $S; }
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader | tee -a $S
t0=$SECONDS; M=/tmp/fddp; mkdir -p $M
case $MODEL in qwen3-0.6b) V=151936 ;; llama3.2-1b) V=128256 ;; gemma3-270m) V=262144 ;; *) say "unknown MODEL $MODEL"; exit 2 ;; esac
python3 tests/fixtures/gen/make_shard.py $M/data.bin 8000000 $V random 3 >/dev/null
# the end-of-run checkpoint is not what is measured: to memory where /dev/shm has room for two at once
CK=/dev/shm; [ "$(df -k --output=avail /dev/shm 2>/dev/null | tail -1)" -gt 64000000 ] 2>/dev/null || CK=$M
ours() { # tag, GPU list, ./train flags...
  local tag=$1 gpus=$2; shift 2
  rm -rf $CK/fddp_$tag
  CUDA_VISIBLE_DEVICES=$gpus timeout 200 ./train -e $MODEL -b $B -t 2048 --max-seq-len 2048 -x 14 --warmup 2 \
    --val-every 0 -s 0 --step-parts 1 -i $M/data.bin -o $CK/fddp_$tag "$@" >$OUT/ours_$tag.log 2>&1
  rm -rf $CK/fddp_$tag
}
tok() { grep '| loss' $OUT/ours_$1.log | tail -8 | grep -oE '[0-9]+ tok/s' | grep -oE '[0-9]+' | sort -n | sed -n 4p; }
report() { # tag
  say "ours $MODEL B$B/GPU $1: ${2:+$2 }$(tok $1) tok/s, $(grep '| loss' $OUT/ours_$1.log | tail -1 | grep -oE '[0-9.]+ GB') $(grep -m1 'data parallel:' $OUT/ours_$1.log | cut -c1-90) $(grep -m1 -i error $OUT/ours_$1.log) [$((SECONDS - t0)) s]"
}
all=$(seq -s, 0 $((G - 1)))
for st in ${STATES:-bf16 fp32}; do
  # one GPU on GPU 0 and on GPU 1 at once (separate GPUs; their mean is the scaling's base)
  ours 1gpu0_$st 0 -g 1 --optimizer-state $st & ours 1gpu1_$st 1 -g 1 --optimizer-state $st; wait
  report 1gpu0_$st; report 1gpu1_$st
  ours ${G}gpu_$st $all -g $G --optimizer-state $st; report ${G}gpu_$st
  a=$(tok 1gpu0_$st) b=$(tok 1gpu1_$st) t=$(tok ${G}gpu_$st)
  [ -n "$a" ] && [ -n "$b" ] && [ -n "$t" ] && say "    $st state scaling: $(python3 -c "print(f'{$t/$a:.3f}x GPU 0 alone, {$t/$b:.3f}x GPU 1 alone, {2*$t/($a+$b):.3f}x their mean')")"
  eval "OURS_$st=$t"
  [ $((SECONDS - t0)) -gt $((BUDGET_S / 2)) ] && break
done
peer() { # tag, batch, stack, GPUs
  local log=$OUT/peer_$1.log
  if [ $4 = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 PYTHONUNBUFFERED=1 timeout 200 python3 dev/bench/bench_family_torch.py --model $MODEL \
      --stack $3 --batch $2 --steps 6 --warmup 3 >$log 2>&1
  else
    PYTHONUNBUFFERED=1 timeout 240 python3 -m torch.distributed.run --standalone --nproc_per_node $4 \
      dev/bench/bench_family_torch.py --model $MODEL --row $3:$2 --steps 6 --warmup 3 >$log 2>&1
  fi
  local row=$(grep -m1 '^csv_torch_family' $log)
  say "peer $1 (csv: model,stack,B,T,ms,tok/s,GB): ${row:-failed: $(grep -m1 -iE 'error|out of memory' $log | cut -c1-160)} [$((SECONDS - t0)) s]"
  local t=$(echo "$row" | cut -d, -f7)
  [[ $t =~ ^[0-9]+$ ]] && eval "PEER_$1=$t"
}
peer liger_1 $B liger 1
peer liger_$G $B liger $G
[ -n "$PEER_liger_1" ] && [ -n "$(eval echo \$PEER_liger_$G)" ] && say "    Liger DDP scaling: $(python3 -c "print(f'{$(eval echo \$PEER_liger_$G)/$PEER_liger_1:.3f}x')")"
for st in bf16 fp32; do
  o=$(eval echo \${OURS_$st:-}) p=$(eval echo \${PEER_liger_$G:-})
  [ -n "$o" ] && [ -n "$p" ] && say "ours ($st state) on $G GPUs against Liger DDP on $G: $(python3 -c "print(f'{$o/$p:.3f}x')")"
done
if [ $((SECONDS - t0)) -lt $((BUDGET_S - 200)) ]; then
  peer compile_1 $COMPILE_B compile 1
  [ $((SECONDS - t0)) -lt $((BUDGET_S - 120)) ] && peer compile_$G $COMPILE_B compile $G
fi
tar -czf $OUT/logs.tar.gz -C $OUT $(cd $OUT && ls *.log) && rm -f $OUT/*.log
say "---- elapsed $((SECONDS - t0)) s"
