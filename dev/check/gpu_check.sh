#!/usr/bin/env bash
# One run on a GPU machine: build for sm_90a, run the GPU tests, a short training run checked against
# Hugging Face transformers, and trainer throughput at GPT-2 124M. Prints a summary table last.
#   bash dev/check/gpu_check.sh [tests] [train] [throughput] [bench] [cli] [compare] [memory]
#       (default: tests train throughput; cli and compare need the default corpus, packed by
#        `dev/check/pack_corpus.sh --shards -o inputs/corpus.tar.xz` and carried as inputs)
#   TP_OUTPUTS="canonical fused fused:0"  output layers the throughput section trains with ("fused:MB"
#                                           adds --logits-mb MB; 0 is the fused layer's streaming path)
#   B_THROUGHPUT=32 TP_VOCABS=262144        its micro-batch (default 16) and vocabularies (50304 262144)
#   TP_TORCH=1                              also the PyTorch peer (dev/bench/bench_trainer_torch.py, torch.compile)
#   BENCH_SHAPES="768,16384,262144 ..."     shapes of the output-layer benchmark (bench section)
#   LAYERS="fused canonical" MEMORY_SIZES="288 256"  the memory section's layers and batch sizes
#   bench: also dev/bench/bench_output_layer_torch.py (torch.compile and eager) on the same shapes
# Logs go to one archive, $OUT/logs.tar.gz (one file to copy back from the GPU machine), and the
# summary to $OUT/summary.txt; $OUT defaults to ./out.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT" /tmp/fg
sections=${*:-tests train throughput}
LOGS=/tmp/fg/logs
mkdir -p "$LOGS"
if [ -f inputs/corpus.tar.xz ]; then mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache; fi
summary=()
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$LOGS/gpu.txt"
make -j16 train build/run_gpu_tests >"$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log"; exit 1; }

if [[ $sections == *tests* ]]; then
    ./build/run_gpu_tests ${GPU_TEST_FILTER:-} 2>&1 | tee "$LOGS/gpu_tests.log"
    summary+=("gpu tests: $(tail -1 "$LOGS/gpu_tests.log")")
fi

if [[ $sections == *train* ]]; then
    echo "gpu_check: tiny training run and HF cross-check $(date +%T)"
    # tiny model on a learnable synthetic corpus: loss must fall; its checkpoint loads into HF
    python3 tests/fixtures/gen/make_shard.py /tmp/fg/train.bin 400000 1000 pattern 1
    python3 tests/fixtures/gen/make_shard.py /tmp/fg/val.bin 40000 1000 pattern 2
    ./train -e tiny -v 1000 -b 8 -t 128 -x 200 -l 3e-3 --warmup 20 --lr-final 3e-4 --val-every 100 \
        --val-batches 1 -s 0 -i /tmp/fg/train.bin -j /tmp/fg/val.bin -o /tmp/fg/run 2>&1 | tee "$LOGS/train_tiny.log"
    final_val=$(grep "val loss" "$LOGS/train_tiny.log" | tail -1 | awk '{print $NF}')
    python3 dev/check/hf_crosscheck.py /tmp/fg/run/step_00000200 /tmp/fg/val.bin 8 128 "$final_val" 2>&1 |
        grep -v Warning | tee "$LOGS/hf_crosscheck.log"
    summary+=("tiny train: first $(grep -m1 '| loss' "$LOGS/train_tiny.log" | awk '{print $5}') -> last $(grep '| loss' "$LOGS/train_tiny.log" | tail -1 | awk '{print $5}'), val $final_val")
    summary+=("$(tail -1 "$LOGS/hf_crosscheck.log")")
fi

if [[ $sections == *throughput* ]]; then
    echo "gpu_check: throughput $(date +%T)"
    for V in ${TP_VOCABS:-50304 262144}; do
        python3 tests/fixtures/gen/make_shard.py /tmp/fg/rand_$V.bin 20000000 $V random 3
        for output in ${TP_OUTPUTS:-canonical fused}; do
            log="$LOGS/d12_V${V}_${output/:/_}.log"
            layer_args=(--output "${output%%:*}")
            [[ $output == *:* ]] && layer_args+=(--logits-mb "${output#*:}")
            rm -rf /tmp/fg/tp # a new run sets an earlier one aside whole: GBs of checkpoints each
            ./train -e d12 -v $V -b ${B_THROUGHPUT:-16} -t 1024 -x 30 --warmup 10 --val-every 0 -s 0 \
                "${layer_args[@]}" -i /tmp/fg/rand_$V.bin -o /tmp/fg/tp >"$log" 2>&1
            # median of steps 11..30 (after warm-up)
            med=$(grep '| loss' "$log" | tail -20 | awk -F'|' '{print $5}' | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            tok=$(grep '| loss' "$log" | tail -20 | awk -F'|' '{print $6}' | awk '{print $1}' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
            line=$(grep '| loss' "$log" | tail -1)
            summary+=("d12 V=$V B=${B_THROUGHPUT:-16} $output: median ${med} ms/step, ${tok} tok/s | last: $line")
            grep -q error "$log" && summary+=("  $(grep error "$log" | head -1)")
        done
    done
    if [ -n "${TP_TORCH:-}" ]; then # the PyTorch peer (torch.compile) in the same call
        PYTHONUNBUFFERED=1 timeout 400 python3 dev/bench/bench_trainer_torch.py --vocab ${TP_VOCABS:-50304 262144} \
            --batch ${B_THROUGHPUT:-16} 2>&1 | grep -v Warning | tee "$LOGS/trainer_torch.log"
        while read -r line; do summary+=("torch.compile trainer (csv_torch_trainer,V,B,T,ms,tok/s,GB): $line"); done \
            < <(grep '^csv_torch_trainer' "$LOGS/trainer_torch.log")
    fi
fi

if [[ $sections == *bench* ]]; then
    echo "gpu_check: output-layer benchmark $(date +%T)"
    make -j16 build/bench_output_layer >>"$LOGS/build.log" 2>&1 || { tail -30 "$LOGS/build.log"; exit 1; }
    args=()
    for s in ${BENCH_SHAPES:-768,16384,50304 768,16384,262144 768,65536,262144 4096,16384,262144}; do
        args+=(--shape "$s")
    done
    ./build/bench_output_layer "${args[@]}" 2>&1 | tee "$LOGS/bench_output_layer.log"
    summary+=("output layer, forward + backward (ms; ratio to the 3 cuBLAS GEMMs; extra GB):")
    while read -r line; do summary+=("  $line"); done < <(sed -n '/^$/,$p' "$LOGS/bench_output_layer.log" | grep '|')
    # PyTorch in the same call, same shapes: the ratios to torch.compile are same-run
    PYTHONUNBUFFERED=1 timeout 300 python3 dev/bench/bench_output_layer_torch.py --no-eager ${BENCH_SHAPES:-768,16384,50304 768,16384,262144 768,65536,262144 4096,16384,262144} \
        2>&1 | tee "$LOGS/bench_output_layer_torch.log"
    summary+=("torch (csv_torch,d,N,V,compile_fwd_ms,compile_fwdbwd_ms,compile_extra_GB,...):")
    while read -r line; do summary+=("  $line"); done < <(grep '^csv_torch,[0-9]' "$LOGS/bench_output_layer_torch.log")
fi

if [[ $sections == *cli* ]]; then
    echo "gpu_check: the README's run command, real text, sampling, resume $(date +%T)"
    # the main command (shortened): default preset d12, fused layer, samples decoded by the tokenizer
    ./train -v 262144 -x 60 --val-every 30 -s 30 -G 32 --prompt "And God said" -o /tmp/fg/main \
        >"$LOGS/main_v262144.log" 2>&1
    summary+=("./train -v 262144 -x 60: exit $? | $(grep -E '^step +1/' "$LOGS/main_v262144.log") -> $(grep -E '^step +60/' "$LOGS/main_v262144.log" | cut -d'|' -f2)")
    summary+=("  $(grep -m1 '^sample at' "$LOGS/main_v262144.log" | cut -c1-150)")
    # GPT-2 124M at V=50304 on real text
    ./train -e d12 -v 50304 -b 16 -x 300 --val-every 100 -s 0 -o /tmp/fg/v50304 >"$LOGS/d12_v50304_real.log" 2>&1
    summary+=("./train -e d12 -v 50304 -b 16 -x 300: exit $? | $(grep 'val loss' "$LOGS/d12_v50304_real.log" | tr '\n' ' ')")
    summary+=("  $(grep -E '^step +300/' "$LOGS/d12_v50304_real.log")")
    # resume on the GPU: 20 steps with a checkpoint at 10, then steps 11-20 again from it
    a="-e d12 -v 50304 -b 8 -t 256 -x 20 -n 10 --keep-checkpoints 3 --val-every 0 -s 0"
    ./train $a -o /tmp/fg/ra >"$LOGS/resume_full.log" 2>&1
    mkdir -p /tmp/fg/rb && cp -r /tmp/fg/ra/step_00000010 /tmp/fg/rb/ && echo step_00000010 >/tmp/fg/rb/latest
    ./train $a -y 1 -o /tmp/fg/rb >"$LOGS/resume_part.log" 2>&1
    full=$(grep -E '^step +(1[1-9]|20)/' "$LOGS/resume_full.log" | cut -d'|' -f1-2)
    part=$(grep -E '^step +(1[1-9]|20)/' "$LOGS/resume_part.log" | cut -d'|' -f1-2)
    if [ -n "$full" ] && [ "$full" = "$part" ]; then summary+=("GPU resume: steps 11-20 identical ($(echo "$full" | wc -l) lines)");
    else summary+=("GPU resume: DIFFERENT"); fi
fi

if [[ $sections == *compare* ]]; then
    echo "gpu_check: compare (fused vs canonical, real text) $(date +%T)"
    # fused vs canonical on real text, GPT-2 124M at V=262144: the README's loss-curve comparison
    make compare COMPARE_ARGS="-e d12 -v 262144 -b 16 -t 1024 -x ${COMPARE_STEPS:-500} --val-every 100" \
        >"$LOGS/compare.log" 2>&1
    mkdir -p "$LOGS/compare"
    for layer in fused canonical; do   # logs only: the checkpoints are gigabytes
        cp "runs/compare/$layer.txt" "$LOGS/compare/$layer.txt"
        cp "runs/compare/$layer/log.jsonl" "$LOGS/compare/$layer.jsonl"
    done
    cp runs/compare/loss_curves.png "$OUT/" 2>/dev/null
    summary+=("$(grep '^compare' "$LOGS/compare.log")")
    for layer in fused canonical; do
        summary+=("  $layer: $(grep -E '^step +[0-9]+/' runs/compare/$layer.txt | tail -1)")
        summary+=("  $layer: $(grep 'val loss' runs/compare/$layer.txt | tail -1)")
    done
    summary+=("  $(grep -m1 'tokenizer:' runs/compare/fused.txt)")
fi

if [[ $sections == *memory* ]]; then
    echo "gpu_check: memory demo $(date +%T)"
    # the default corpus when carried, else random tokens (what fits does not depend on the text)
    shard=$(ls .cache/default-v1-*-v262144/train.bin 2>/dev/null | head -1)
    if [ -z "$shard" ]; then
        shard=/tmp/fg/rand_262144.bin
        [ -f $shard ] || python3 tests/fixtures/gen/make_shard.py $shard 20000000 262144 random 3
    fi
    bash dev/bench/memory_demo.sh "$shard" 262144 ${MEMORY_SIZES:-} >"$LOGS/memory.log" 2>&1
    while read -r line; do summary+=("$line"); done < <(grep 'largest\|none of' "$LOGS/memory.log")
fi

tar -czf "$OUT/logs.tar.gz" -C /tmp/fg logs
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
