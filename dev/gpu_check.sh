#!/usr/bin/env bash
# One device call: build for sm_90a, run the GPU tests, a short training run checked against
# Hugging Face transformers, and trainer throughput at GPT-2 124M. Prints a summary table last.
#   bash dev/gpu_check.sh [tests] [train] [throughput]     (default: all three)
# Logs go to $OUT (the device tool brings them back) or ./out.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT" /tmp/fg
sections=${*:-tests train throughput}
summary=()
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
make -j16 train build/run_gpu_tests >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }

if [[ $sections == *tests* ]]; then
    ./build/run_gpu_tests ${GPU_TEST_FILTER:-} 2>&1 | tee "$OUT/gpu_tests.log"
    summary+=("gpu tests: $(tail -1 "$OUT/gpu_tests.log")")
fi

if [[ $sections == *train* ]]; then
    # tiny model on a learnable synthetic corpus: loss must fall; its checkpoint loads into HF
    python3 dev/make_shard.py /tmp/fg/train.bin 400000 1000 pattern 1
    python3 dev/make_shard.py /tmp/fg/val.bin 40000 1000 pattern 2
    ./train -e tiny -v 1000 -b 8 -t 128 -x 200 -l 3e-3 --warmup 20 --lr-final 3e-4 --val-every 100 \
        --val-batches 1 -s 0 -i /tmp/fg/train.bin -j /tmp/fg/val.bin -o /tmp/fg/run 2>&1 | tee "$OUT/train_tiny.log"
    final_val=$(grep "val loss" "$OUT/train_tiny.log" | tail -1 | awk '{print $NF}')
    python3 dev/hf_crosscheck.py /tmp/fg/run/step_00000200 /tmp/fg/val.bin 8 128 "$final_val" 2>&1 |
        grep -v Warning | tee "$OUT/hf_crosscheck.log"
    summary+=("tiny train: first $(grep -m1 '| loss' "$OUT/train_tiny.log" | awk '{print $5}') -> last $(grep '| loss' "$OUT/train_tiny.log" | tail -1 | awk '{print $5}'), val $final_val")
    summary+=("$(tail -1 "$OUT/hf_crosscheck.log")")
fi

if [[ $sections == *throughput* ]]; then
    for V in 50304 262144; do
        python3 dev/make_shard.py /tmp/fg/rand_$V.bin 20000000 $V random 3
        for output in canonical fused; do
            log="$OUT/d12_V${V}_${output}.log"
            ./train -e d12 -v $V -b ${B_THROUGHPUT:-16} -t 1024 -x 30 --warmup 10 --val-every 0 -s 0 \
                --output $output -i /tmp/fg/rand_$V.bin -o /tmp/fg/tp >"$log" 2>&1
            # median of steps 11..30 (after warm-up)
            med=$(grep '| loss' "$log" | tail -20 | awk -F'|' '{print $5}' | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            tok=$(grep '| loss' "$log" | tail -20 | awk -F'|' '{print $6}' | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            line=$(grep '| loss' "$log" | tail -1)
            summary+=("d12 V=$V B=${B_THROUGHPUT:-16} $output: median ${med} ms/step, ${tok} tok/s | last: $line")
            grep -q error "$log" && summary+=("  $(grep error "$log" | head -1)")
        done
    done
fi

echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
