#!/usr/bin/env bash
# One H100: Gemma-3-270M (QK-norm, V 262144) at B 16 and 32 with the rotated q, k kept (the default)
# and recomputed (--recompute-gelu 1), alternating, two rounds:  OUT=out bash gemma.sh
OUT=${OUT:-out}; M=/tmp/gq; mkdir -p $OUT $M
S=$OUT/gemma_summary.txt; : >$S
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $S
python3 tests/fixtures/gen/make_shard.py $M/g.bin 6000000 262144 random 5 >/dev/null
for r in 1 2; do for b in 16 32; do for rc in 0 1; do
  rm -rf $M/o; timeout 100 ./train -e gemma3-270m -b $b -t 2048 -x 14 --warmup 2 --val-every 0 -s 0 -n 0 --step-parts 1 --recompute-gelu $rc -i $M/g.bin -o $M/o > $OUT/gemma_b${b}_rc${rc}_$r.log 2>&1
  echo "Gemma-3-270M B$b --recompute-gelu $rc r$r: $(grep '| loss' $OUT/gemma_b${b}_rc${rc}_$r.log | tail -8 | grep -oE '[0-9.]+ tok/s' | sort -n | sed -n 4p) $(grep '| loss' $OUT/gemma_b${b}_rc${rc}_$r.log | tail -1 | grep -oE 'fwd [0-9.]+ out [0-9.]+ bwd [0-9.]+|[0-9.]+ GB$' | tr '\n' ' ') $(grep -m1 error $OUT/gemma_b${b}_rc${rc}_$r.log)" | tee -a $S
done; done; done
