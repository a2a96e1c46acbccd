#!/usr/bin/env bash
# One run on a machine with two or more GPUs (two H200s linked by NVLink here): data-parallel training in
# every mode against one GPU at the same global batch, resume on 2 GPUs (and their checkpoint
# resumed on one GPU), a killed worker, and GPT-2 124M tokens/s on 1 and 2 GPUs with the time each
# step waited on communication. Prints a summary last. NCCL's environment (NCCL_NVLS_ENABLE=0 on
# the H200 machine measured) is left as the machine sets it. SECTIONS picks parts: tests correct nodes
# resume kill throughput sweep skew real (default: all but sweep, skew and real).
#   throughput: one GPU alone on each GPU, then every mode on G GPUs, with the scaling against each
#     GPU alone and against their mean (two GPUs move at the slower one's pace).
#   skew: GPU 0 beside an independent run on GPU 1 (do they slow each other down?).
#   nodes: two "hosts" on this one (a launcher per GPU, --nodes 2 over loopback TCP).
#   real: ./train -g G -v 262144 on the default corpus (carried as .carry/corpus.tar.xz, see
#     dev/check/pack_corpus.sh) against one GPU at the same global batch.
# TP_VOCABS: vocabularies of the throughput and sweep sections (default "50304 262144");
# TP_OUTPUTS: output layers of the throughput section (default fused; "fused fused:0 canonical" for all,
#   "fused:MB" passing --logits-mb MB: 0 is the fused layer's streaming path).
set -uo pipefail
OUT=${OUT:-out}
SECTIONS=${SECTIONS:-tests correct nodes resume kill throughput}
TP_VOCABS=${TP_VOCABS:-50304 262144}
TP_OUTPUTS=${TP_OUTPUTS:-fused} # output layers of the throughput section ("fused canonical": both)
G=${G:-2} # GPUs to compare with one
mkdir -p "$OUT" /tmp/mg
summary=()
note() { summary+=("$1"); echo "$1" >>"$OUT/summary.txt"; }  # kept as we go: a timeout keeps what ran
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
: >"$OUT/summary.txt"
nvidia-smi --query-gpu=index,name --format=csv,noheader
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
targets="train"
has tests && targets="train build/run_gpu_tests"
make -j32 $targets >/tmp/mg/build.log 2>&1 || { tail -30 /tmp/mg/build.log; exit 1; }
if has tests; then
    ./build/run_gpu_tests adamw >/tmp/mg/gpu_tests.log 2>&1
    ./build/run_gpu_tests backend >>/tmp/mg/gpu_tests.log 2>&1
    note "GPU tests (adamw, backend): $(grep -E 'passed' /tmp/mg/gpu_tests.log | tr '\n' ' ')$(grep -m3 FAILED /tmp/mg/gpu_tests.log)"
fi
python3 tests/fixtures/gen/make_shard.py /tmp/mg/train.bin 2000000 1000 pattern 1
python3 tests/fixtures/gen/make_shard.py /tmp/mg/val.bin 100000 1000 pattern 2
losses_py='
import re, sys
def losses(p):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
verdict = "ok" if len(a) == len(b) and len(a) > 0 and worst <= 1e-3 else "FAIL"
last_a, last_b = (a[-1] if a else None), (b[-1] if b else None)
print(f"{sys.argv[3]}: {len(a)} vs {len(b)} steps, largest |loss difference| {worst:.2e} ({verdict}, bound 1e-3), final {last_a} vs {last_b}")
'
common="-e tiny -v 1000 -b 8 -t 128 -x 50 -l 2e-3 --warmup 5 --val-every 25 --val-batches 2 -s 0 -i /tmp/mg/train.bin -j /tmp/mg/val.bin"
if has correct; then
    # one GPU accumulating G (or 2G) micro-batches against G GPUs taking one (or two) each
    for d in $((1024 * G)) $((2048 * G)); do
        ./train $common -d $d -o /tmp/mg/one_$d >/tmp/mg/one_$d.log 2>&1
        for mode in "--overlap-comm 1" "--overlap-comm 0" "--zero 1" "--zero 1 --overlap-comm 0"; do
            tag="$(echo "$mode" | tr -d ' -')"
            log=/tmp/mg/dp_${d}_$tag.log
            ./train -g $G $common -d $d $mode -o /tmp/mg/dp_${d}_$tag >$log 2>&1
            rc=$?
            note "$(python3 -c "$losses_py" /tmp/mg/one_$d.log $log "-d $d, 1 vs $G GPUs $mode (exit $rc)") $(grep -m1 error $log)"
            note "    val: $(grep 'val loss' /tmp/mg/one_$d.log | tail -1 | cut -d'|' -f2) vs $(grep 'val loss' $log | tail -1 | cut -d'|' -f2); comm $(grep '| loss' $log | tail -1 | grep -o 'comm [0-9.]* ms')"
        done
    done
    # the fused layer's other path, streaming (the runs above take its default, scaled exponentials), 1 vs G GPUs
    d=$((1024 * G)) chunked="--output fused --logits-mb 0"
    ./train $common -d $d $chunked -o /tmp/mg/one_chunked >/tmp/mg/one_chunked.log 2>&1
    ./train -g $G $common -d $d $chunked -o /tmp/mg/dp_chunked >/tmp/mg/dp_chunked.log 2>&1
    rc=$?
    note "$(python3 -c "$losses_py" /tmp/mg/one_chunked.log /tmp/mg/dp_chunked.log "-d $d, 1 vs $G GPUs $chunked (exit $rc)") $(grep -m1 error /tmp/mg/dp_chunked.log)"
fi
if has nodes; then
    # two launchers, as on two hosts, one GPU each, meeting at node 0's rendezvous on loopback
    d=$((1024 * G))
    [ -f /tmp/mg/one_$d.log ] || ./train $common -d $d -o /tmp/mg/one_$d >/tmp/mg/one_$d.log 2>&1
    pids=()
    for n in 0 1; do
        CUDA_VISIBLE_DEVICES=$n ./train --nodes 2 --node-rank $n --master 127.0.0.1:29517 $common -d $d \
            -o /tmp/mg/nodes_$n >/tmp/mg/nodes_$n.log 2>&1 &
        pids+=($!)
    done
    wait ${pids[0]}; rc0=$?; wait ${pids[1]}; rc1=$?
    note "$(python3 -c "$losses_py" /tmp/mg/one_$d.log /tmp/mg/nodes_0.log "-d $d, 1 GPU vs 2 nodes x 1 GPU (exit $rc0, $rc1)") $(grep -m1 error /tmp/mg/nodes_*.log)"
    # a node that never shows up: node 0 alone must give up with an error, not hang
    t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=0 FUSEDGPT_RENDEZVOUS_TIMEOUT=20 timeout 200 ./train --nodes 2 --node-rank 0 \
        --master 127.0.0.1:29518 $common -o /tmp/mg/nodes_alone >/tmp/mg/nodes_alone.log 2>&1
    note "node 1 never starts: node 0 exit $? after $(( $(date +%s) - t0 )) s: $(grep -m1 error /tmp/mg/nodes_alone.log)"
fi
if has resume; then
    # resume on G GPUs: 20 steps with a checkpoint at 10, then 11-20 again from it
    for mode in "--zero 0" "--zero 1"; do
        tag="$(echo "$mode" | tr -d ' -')"
        r="-g $G $common -d $((1024 * G)) -x 20 -n 10 --keep-checkpoints 3 $mode"
        ./train $r -o /tmp/mg/ra_$tag >/tmp/mg/ra_$tag.log 2>&1
        mkdir -p /tmp/mg/rb_$tag && cp -r /tmp/mg/ra_$tag/step_00000010 /tmp/mg/rb_$tag/ &&
            echo step_00000010 >/tmp/mg/rb_$tag/latest
        ./train $r -y 1 -o /tmp/mg/rb_$tag >/tmp/mg/rb_$tag.log 2>&1
        full=$(grep -E '^step +(1[1-9]|20)/' /tmp/mg/ra_$tag.log | cut -d'|' -f1-2)
        part=$(grep -E '^step +(1[1-9]|20)/' /tmp/mg/rb_$tag.log | cut -d'|' -f1-2)
        if [ -n "$full" ] && [ "$full" = "$part" ]; then note "$G-GPU resume $mode: steps 11-20 identical";
        else note "$G-GPU resume $mode: DIFFERENT ($(echo "$full" | wc -l) vs $(echo "$part" | wc -l) lines) $(grep -m1 error /tmp/mg/rb_$tag.log)"; fi
        # the same checkpoint resumed on one GPU (accumulating G): the same data, losses to rounding
        mkdir -p /tmp/mg/rc_$tag && cp -r /tmp/mg/ra_$tag/step_00000010 /tmp/mg/rc_$tag/ &&
            echo step_00000010 >/tmp/mg/rc_$tag/latest
        ./train ${r#-g $G } -y 1 -o /tmp/mg/rc_$tag >/tmp/mg/rc_$tag.log 2>&1
        grep -E '^step +(1[1-9]|20)/' /tmp/mg/ra_$tag.log >/tmp/mg/ra_tail_$tag.log
        note "$(python3 -c "$losses_py" /tmp/mg/ra_tail_$tag.log /tmp/mg/rc_$tag.log "steps 11-20, $G GPUs vs their checkpoint resumed on 1 GPU $mode") $(grep -m1 error /tmp/mg/rc_$tag.log)"
    done
fi
if has kill; then
    # a killed worker ends the run with an error naming it
    ./train -g $G $common -d $((1024 * G)) -x 100000 -o /tmp/mg/kill >/tmp/mg/kill.log 2>&1 &
    launcher=$!
    sleep 15
    victim=$(pgrep -P $launcher | tail -1)
    t0=$(date +%s)
    kill -9 "$victim"
    wait $launcher
    rc=$?
    note "killed worker pid $victim: launcher exit $rc after $(( $(date +%s) - t0 )) s: $(grep 'error' /tmp/mg/kill.log | head -3 | tr '\n' ' ')"
fi
# GPT-2 124M, T=1024, B=32 per GPU (as the DDP anchors): median ms and tok/s of the last 30 of 40
# steps, and the median time a step waited on communication. $1: V, $2: tag, rest: env/flags.
throughput() {
    local V=$1 tag=$2; shift 2
    local log=/tmp/mg/tp_${V}_$tag.log
    rm -rf /tmp/mg/tp # a new run sets an earlier one aside whole: GBs of checkpoints each
    env "$@" --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -i /tmp/mg/rand_$V.bin -o /tmp/mg/tp >$log 2>&1
    col() { grep '| loss' $log | tail -30 | awk -F'|' -v c=$1 '{print $c}' | awk '{print $1}' | sort -n | sed -n 15p; }
    local comm=$(grep '| loss' $log | tail -30 | grep -o 'comm [0-9.]*' | awk '{print $2}' | sort -n | sed -n 15p)
    local parts=$(grep '| loss' $log | tail -30 | grep -o 'fwd [0-9.]* out [0-9.]* bwd [0-9.]*' | sort -t' ' -k4 -n | sed -n 15p)
    TP_TOK=$(col 6)
    note "d12 V=$V B=32/GPU $tag: median $(col 5) ms/step, $TP_TOK tok/s, comm wait ${comm:-0} ms, $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 error $log)"
    note "    GPU ms of a step's parts (a middle step by output layer time): ${parts:-none}"
}
if has throughput || has sweep || has skew; then
    for V in $TP_VOCABS; do
        python3 tests/fixtures/gen/make_shard.py /tmp/mg/rand_$V.bin 40000000 $V random 3
        for out in $TP_OUTPUTS; do
            has throughput || break
            sfx=$([ $out = fused ] || echo _$out)
            # one GPU on each GPU: two GPUs move at the slower one's pace, and two H200s measured have
            # differed by 2.8 % (dev/RESULTS.md), so scaling is given against each and their mean
            throughput $V 1gpu$sfx ./train -g 1 --output $out
            one0=$TP_TOK
            throughput $V 1gpu_on_gpu1$sfx CUDA_VISIBLE_DEVICES=1 ./train -g 1 --output $out
            one1=$TP_TOK
            for mode in "allreduce_after|--overlap-comm 0" "overlap|" "zero1|--zero 1"; do
                IFS='|' read -r tag flags <<<"$mode"
                throughput $V $tag$sfx ./train -g $G $flags --output $out
                note "    scaling: $(python3 -c "
t, a, b, V = float('${TP_TOK:-0}'), float('${one0:-0}'), float('${one1:-0}'), $V
ddp = {50304: 970e3, 262144: 473e3}.get(V)  # PyTorch DDP's two-GPU tokens/s, ../shared/anchors.md
if a and b:
    print(f'{t / a:.3f}x GPU 0 alone, {t / b:.3f}x GPU 1 alone, {2 * t / (a + b):.3f}x their mean'
          + (f'; {t / ddp:.3f}x PyTorch DDP' if ddp and $G == 2 else ''))
" 2>/dev/null || echo none)"
            done
        done
        if has skew; then
            # do the GPUs slow each other down? GPU 0 beside an independent run on GPU 1 (each GPU
            # alone: the throughput section)
            rm -rf /tmp/mg/tp_side
            CUDA_VISIBLE_DEVICES=1 ./train -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
                -i /tmp/mg/rand_$V.bin -o /tmp/mg/tp_side >/tmp/mg/tp_${V}_side.log 2>&1 &
            side=$!
            throughput $V 1gpu_beside_another CUDA_VISIBLE_DEVICES=0 ./train -g 1
            wait $side
        fi
        if has sweep; then
            throughput $V overlap_b128 ./train -g $G --bucket-mb 128
            throughput $V overlap_ctas4 NCCL_MAX_CTAS=4 ./train -g $G
            throughput $V overlap_b128_ctas8 NCCL_MAX_CTAS=8 ./train -g $G --bucket-mb 128
            throughput $V zero1_after ./train -g $G --zero 1 --overlap-comm 0
            throughput $V zero1_b128_ctas8 NCCL_MAX_CTAS=8 ./train -g $G --zero 1 --bucket-mb 128
        fi
    done
fi
if has real; then
    # the check that matters: ./train -g G -v 262144 on real text, against one GPU accumulating G
    # micro-batches (same global batch, same data order); 60 steps of GPT-2 124M, B=16, T=1024
    if [ -f .carry/corpus.tar.xz ]; then mkdir -p .cache && tar -xJf .carry/corpus.tar.xz -C .cache; fi
    r="-v 262144 -b 16 -t 1024 -x 60 --warmup 20 --val-every 30 --val-batches 4 -s 0 -d $((16384 * G))"
    ./train $r -o /tmp/mg/real_1 >/tmp/mg/real_1.log 2>&1
    ./train -g $G $r -o /tmp/mg/real_$G >/tmp/mg/real_$G.log 2>&1
    note "$(python3 -c "${losses_py//1e-3/1e-2}" /tmp/mg/real_1.log /tmp/mg/real_$G.log "real text d12 V=262144, 1 vs $G GPUs") $(grep -m1 error /tmp/mg/real_*.log)"
    note "    val: $(grep 'val loss' /tmp/mg/real_1.log | tail -1 | cut -d'|' -f2) vs $(grep 'val loss' /tmp/mg/real_$G.log | tail -1 | cut -d'|' -f2); $(grep -m1 'tokenizer' /tmp/mg/real_1.log)"
fi
tar -czf "$OUT/mg_logs.tar.gz" -C /tmp/mg $(cd /tmp/mg && ls *.log)
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
