#!/usr/bin/env bash
# One run on a machine with two or more GPUs: data-parallel training in every mode against one GPU
# at the same global batch, two identical runs compared bit for bit, resume on G GPUs (and their
# checkpoint resumed on one GPU), a killed worker, and GPT-2 124M tokens/s on 1 and G GPUs beside
# PyTorch (torch.compile on one GPU, DDP + torch.compile on G) in the same call. Prints a summary
# last. NCCL's environment (NCCL_NVLS_ENABLE=0 where the machine sets it) is left as it is.
# SECTIONS picks parts: tests correct families bitwise nodes resume kill throughput peers sweep skew vocabpar
# real (default: tests correct bitwise nodes resume kill). TRAIN_PREBUILT=1: use ./train as it is
# (no make; the section tests still needs build/run_gpu_tests).
#   correct: 1 GPU accumulating G micro-batches against G GPUs taking one each. Both compute the same
#     function; each micro-batch runs the same kernels on the same inputs on either, and only the order of the
#     fp32 sums over micro-batches and ranks differs. So two checks carry a bound: step 1's loss
#     agrees to fp32 rounding (2e-6 relative; it comes out equal), and step 1's reduced gradient,
#     read back as AdamW's first moment, agrees to 1e-5 relative L2 (a few fp32 roundings give
#     ~1e-7; a bucket not reduced or a wrong scale gives 1e-2 and more). Later steps drift apart
#     chaotically once a bf16 weight rounds the other way; that drift is reported beside the
#     largest drift of three one-GPU runs that differ only in batching (-b 8, 4, 2 at the same
#     global batch: the same sequences and mean, other GEMM shapes and sum orders), as a ratio, not
#     a verdict: one 50-step drift is one sample of a random quantity (dev/RESULTS.md, Multi-GPU).
#   families: the RoPE families, as correct's verdicts (step 1's loss, step 1's AdamW m) at G·B·T
#     tokens a step, overlapped all-reduce and ZeRO-1: a tiny Qwen3 (tied head, QK-norm) and a
#     tiny Llama with GQA and an untied head (a random checkpoint written here, through
#     --init-from: no flag unties a head); then Qwen3-0.6B tokens/s on 1 and G GPUs and the scaling.
#   bitwise: the same G-GPU run twice (overlapped all-reduce, ZeRO-1): losses and final weights
#     must be equal bit for bit.
#   throughput: one GPU alone on each GPU, then every mode on G GPUs, with the scaling against each
#     GPU alone and against their mean (G GPUs move at the slowest one's pace).
#   peers: PyTorch torch.compile on one GPU and DDP + torch.compile on G GPUs (dev/bench/bench_trainer_torch.py),
#     the same model, B and T as the throughput section; the throughput lines then give our
#     tokens/s against DDP's measured here.
#   skew: GPU 0 beside an independent run on GPU 1 (do they slow each other down?).
#   nodes: two "hosts" on this one (a launcher per GPU, --nodes 2 over loopback TCP).
#   vocabpar: --vocab-parallel (the head split by vocabulary rows) on three tiny models (V 1000,
#     Vp 1024): an untied Llama, and a tied GPT-2 and a tied Qwen3, whose slices are also their token
#     embeddings', against data parallelism and one GPU at the same global batch, all on the fused
#     layer's streaming path (the slice layer's kernels). Verdicts per model: step 1's loss to 2e-6
#     relative (the forward is the same; the combined lse differs by fp32 rounding); step 1's AdamW
#     m (0.1 g) against data parallelism, the head's rows to 1e-3 (untied; 1e-2 tied) and all rows
#     to 1e-2 relative L2 (derived beside vp_moment_py below), also over two micro-batches a rank;
#     two identical runs bitwise; resume from step 10 on G GPUs identical. Tied models also resume
#     step 10's checkpoint across the split: --vocab-parallel's on one GPU without it (and on G/2
#     GPUs with it when G >= 4), data parallelism's with --vocab-parallel, step 11's loss to 2e-6.
#     Then at V = 262144, B = 32 per GPU, tokens/s and memory, data parallel against
#     --vocab-parallel: a GPT-2 124M-shaped untied Llama, and GPT-2 124M itself (tied). Exits 1 when
#     a verdict fails.
#   real: ./train -g G -v 262144 on the default corpus (carried as .carry/corpus.tar.xz, see
#     dev/check/pack_corpus.sh) against one GPU at the same global batch.
# TP_VOCABS: vocabularies of the throughput, peers and sweep sections (default "50304 262144");
# TP_OUTPUTS: output layers of the throughput section (default fused; "fused fused:0 canonical" for all,
#   "fused:MB" passing --logits-mb MB: 0 is the fused layer's streaming path).
set -uo pipefail
OUT=${OUT:-out}
SECTIONS=${SECTIONS:-tests correct bitwise nodes resume kill}
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
has vocabpar && targets="train build/run_gpu_tests"
if [ "${TRAIN_PREBUILT:-0}" != 1 ]; then
    make -j32 $targets >/tmp/mg/build.log 2>&1 || { tail -30 /tmp/mg/build.log; exit 1; }
fi
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
bound = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-3
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
first = abs(a[0] - b[0]) / b[0] if a and b else float("nan")
ok = len(a) == len(b) and len(a) > 0 and worst <= bound and first <= 2e-6
verdict = "ok" if ok else "FAIL"
print(f"{sys.argv[3]}: {len(a)} vs {len(b)} steps, step 1 {first:.1e} relative, largest |loss difference| {worst:.2e}"
      f" ({verdict}, bound {bound:.2e}), final {a[-1] if a else None} vs {b[-1] if b else None}")
'
# AdamW's first moment after one step (m = 0.1 g, the clipped reduced gradient) of two checkpoints'
# state.bin (params, m, v: fp32, the file's last 3n floats). The same micro-batch gradients summed
# in another order differ by a few fp32 roundings, relative L2 ~1e-7; the bound 1e-5 is far above
# that and far below any real fault (a bucket not reduced, a wrong scale: 1e-2 and more).
moment_py='
import struct, sys, numpy as np
def m_of(p):
    b = open(p, "rb").read()
    n = struct.unpack_from("<Q", b, 112)[0]
    return np.frombuffer(b[len(b) - 8 * n:len(b) - 4 * n], dtype=np.float32).astype(np.float64)
a, b = m_of(sys.argv[1]), m_of(sys.argv[2])
rel = np.linalg.norm(a - b) / np.linalg.norm(a)
verdict = "ok" if rel <= 1e-5 else "FAIL"
print(f"AdamW m relative L2 difference {rel:.2e} ({verdict}, bound 1e-5), {np.mean(a == b) * 100:.1f} % of elements equal")
'
# 1 vs G GPUs: step 1 to fp32 rounding (the verdict), then the drift over the run beside the
# rounding-only floor (argv[4])
drift_py='
import re, sys
def losses(p):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
floor = float(sys.argv[4])
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
first = abs(a[0] - b[0]) / b[0] if a and b else float("nan")
verdict = "ok" if len(a) == len(b) and len(a) > 0 and first <= 2e-6 else "FAIL"
print(f"{sys.argv[3]}: {len(a)} vs {len(b)} steps, step 1 {first:.1e} relative ({verdict}, bound 2e-6); largest"
      f" |loss difference| {worst:.2e} = {worst / floor:.2f}x the rounding-only floor {floor:.2e}; final {a[-1] if a else None} vs {b[-1] if b else None}")
'
# the largest per-step loss difference of two logs
worst_py='
import re, sys
l = [[float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)] for p in sys.argv[1:3]]
print(f"{max(abs(x - y) for x, y in zip(*l)):.3e}" if l[0] and l[1] else "nan")
'
common="-e tiny -v 1000 -b 8 -t 128 -x 50 -l 2e-3 --warmup 5 --val-every 25 --val-batches 2 -s 0 -i /tmp/mg/train.bin -j /tmp/mg/val.bin"
if has correct; then
    # one GPU accumulating G (or 2G) micro-batches against G GPUs taking one (or two) each
    for d in $((1024 * G)) $((2048 * G)); do
        ./train $common -d $d -o /tmp/mg/one_$d >/tmp/mg/one_$d.log 2>&1
        # the noise floor: the same global batch in micro-batches of 4 and of 2 (rounding only);
        # its size is the largest drift of the three pairs
        for b in 4 2; do
            ./train ${common/-b 8/-b $b} -d $d -o /tmp/mg/one_b${b}_$d >/tmp/mg/one_b${b}_$d.log 2>&1
        done
        floor=0
        for pair in "one_$d one_b4_$d" "one_$d one_b2_$d" "one_b4_$d one_b2_$d"; do
            set -- $pair
            w=$(python3 -c "$worst_py" /tmp/mg/$1.log /tmp/mg/$2.log)
            note "-d $d: noise floor $1 vs $2: $(python3 -c "$losses_py" /tmp/mg/$1.log /tmp/mg/$2.log "rounding only" 1)"
            floor=$(python3 -c "print(max($floor, float('$w')))")
        done
        echo "$floor" >/tmp/mg/floor_$d
        # one step's reduced gradient, through AdamW's first moment m = 0.1 g after step 1
        ./train $common -d $d -x 1 -o /tmp/mg/one_step1_$d >/tmp/mg/one_step1_$d.log 2>&1
        for mode in "--overlap-comm 1" "--overlap-comm 0" "--zero 1" "--zero 1 --overlap-comm 0"; do
            tag="$(echo "$mode" | tr -d ' -')"
            log=/tmp/mg/dp_${d}_$tag.log
            ./train -g $G $common -d $d $mode -o /tmp/mg/dp_${d}_$tag >$log 2>&1
            rc=$?
            note "$(python3 -c "$drift_py" /tmp/mg/one_$d.log $log "-d $d, 1 vs $G GPUs $mode (exit $rc)" $floor) $(grep -m1 error $log)"
            note "    val: $(grep 'val loss' /tmp/mg/one_$d.log | tail -1 | cut -d'|' -f2) vs $(grep 'val loss' $log | tail -1 | cut -d'|' -f2); comm $(grep '| loss' $log | tail -1 | grep -o 'comm [0-9.]* ms')"
            ./train -g $G $common -d $d -x 1 $mode -o /tmp/mg/dp_step1_${d}_$tag >/dev/null 2>&1
            note "    step 1's gradient: $(python3 -c "$moment_py" /tmp/mg/one_step1_$d/step_00000001/state.bin \
                /tmp/mg/dp_step1_${d}_$tag/step_00000001/state.bin 2>&1 | tail -1)"
        done
    done
    # the fused layer's other path, streaming (the runs above take its default, scaled exponentials), 1 vs G GPUs
    d=$((1024 * G)) streaming="--output fused --logits-mb 0"
    ./train $common -d $d $streaming -o /tmp/mg/one_streaming >/tmp/mg/one_streaming.log 2>&1
    ./train ${common/-b 8/-b 4} -d $d $streaming -o /tmp/mg/one_b4_streaming >/tmp/mg/one_b4_streaming.log 2>&1
    floor=$(python3 -c "$worst_py" /tmp/mg/one_streaming.log /tmp/mg/one_b4_streaming.log)
    ./train -g $G $common -d $d $streaming -o /tmp/mg/dp_streaming >/tmp/mg/dp_streaming.log 2>&1
    rc=$?
    note "$(python3 -c "$drift_py" /tmp/mg/one_streaming.log /tmp/mg/dp_streaming.log "-d $d, 1 vs $G GPUs $streaming (exit $rc)" $floor) $(grep -m1 error /tmp/mg/dp_streaming.log)"
fi
# A random Llama checkpoint (config.json + fp32 model.safetensors) with GQA and an untied head:
# L=2, C=128, NH=4, NKV=2, hd=64, F=256, V=1000. argv[1]: its directory.
untied_llama_py='
import json, os, struct, sys, numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
L, C, NH, NKV, HD, F, V = 2, 128, 4, 2, 64, 256, 1000
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": C, "intermediate_size": F,
           "num_attention_heads": NH, "num_key_value_heads": NKV, "head_dim": HD, "num_hidden_layers": L,
           "vocab_size": V, "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32"}, open(f"{d}/config.json", "w"))
shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
for l in range(L):
    p = f"model.layers.{l}."
    shapes.update({p + "input_layernorm.weight": (C,), p + "post_attention_layernorm.weight": (C,),
                   p + "self_attn.q_proj.weight": (NH * HD, C), p + "self_attn.k_proj.weight": (NKV * HD, C),
                   p + "self_attn.v_proj.weight": (NKV * HD, C), p + "self_attn.o_proj.weight": (C, NH * HD),
                   p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                   p + "mlp.down_proj.weight": (C, F)})
rng = np.random.default_rng(0)
header, blobs, off = {}, [], 0
for name, shape in shapes.items():
    a = (np.ones(shape) if len(shape) == 1 else rng.normal(0, 0.02, shape)).astype(np.float32).tobytes()
    header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(a)]}
    blobs.append(a)
    off += len(a)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(f"{d}/model.safetensors", "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
'
if has families; then
    # 1 GPU accumulating G micro-batches against G GPUs taking one each, as correct; 20 steps, the
    # verdicts on step 1 (later steps drift apart once a bf16 weight rounds the other way)
    d=$((8 * 128 * G))
    fam_common="-v 1000 -b 8 -t 128 -l 2e-3 --warmup 5 --val-every 0 -s 0 -i /tmp/mg/train.bin -d $d"
    python3 -c "$untied_llama_py" /tmp/mg/untied_llama
    for fam in "qwen3|--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256" \
        "llama_untied|--init-from /tmp/mg/untied_llama"; do
        IFS='|' read -r name flags <<<"$fam"
        ./train $flags $fam_common -x 20 -o /tmp/mg/fam_one_$name >/tmp/mg/fam_one_$name.log 2>&1
        ./train $flags $fam_common -x 1 -o /tmp/mg/fam_one_step1_$name >/tmp/mg/fam_one_step1_$name.log 2>&1
        note "$name: $(grep -m1 '^family' /tmp/mg/fam_one_$name.log) $(grep -m1 error /tmp/mg/fam_one_*$name.log)"
        for mode in "--overlap-comm 1" "--zero 1"; do
            tag="$(echo "$mode" | tr -d ' -')"
            log=/tmp/mg/fam_dp_${name}_$tag.log
            ./train -g $G $flags $fam_common $mode -x 20 -o /tmp/mg/fam_dp_${name}_$tag >$log 2>&1
            rc=$?
            # bound 1 on the later steps: the verdict is step 1's 2e-6
            note "$(python3 -c "$losses_py" /tmp/mg/fam_one_$name.log $log "$name, 1 vs $G GPUs $mode (exit $rc)" 1) $(grep -m1 error $log)"
            ./train -g $G $flags $fam_common $mode -x 1 -o /tmp/mg/fam_dp_step1_${name}_$tag \
                >/tmp/mg/fam_dp_step1_${name}_$tag.log 2>&1
            note "    step 1's gradient: $(python3 -c "$moment_py" /tmp/mg/fam_one_step1_$name/step_00000001/state.bin \
                /tmp/mg/fam_dp_step1_${name}_$tag/step_00000001/state.bin 2>&1 | tail -1)"
        done
    done
    # Qwen3-0.6B, B=8, T=2048 per GPU, random tokens: median tok/s of the last 8 of 12 steps
    python3 tests/fixtures/gen/make_shard.py /tmp/mg/rand_qwen3.bin 1000000 151936 random 3
    for g in 1 $G; do
        rm -rf /tmp/mg/fam_tp # the final checkpoint of a 0.6B run: ~9 GB
        ./train -g $g -e qwen3-0.6b -b 8 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 \
            -i /tmp/mg/rand_qwen3.bin -o /tmp/mg/fam_tp >/tmp/mg/fam_tp_$g.log 2>&1
        tok[$g]=$(grep '| loss' /tmp/mg/fam_tp_$g.log | tail -8 | grep -o '[0-9.]* tok/s' | awk '{print $1}' | sort -n | sed -n 4p)
        note "qwen3-0.6b B=8/GPU T=2048 on $g GPU(s): median ${tok[$g]:-none} tok/s, $(grep '| loss' /tmp/mg/fam_tp_$g.log | tail -1 | grep -o 'comm [0-9.]* ms') $(grep -m1 error /tmp/mg/fam_tp_$g.log)"
    done
    rm -rf /tmp/mg/fam_tp
    note "    qwen3-0.6b scaling, $G GPUs against 1: $(python3 -c "print(f'{float(\"${tok[$G]:-0}\") / float(\"${tok[1]:-0}\"):.3f}x')" 2>/dev/null || echo none)"
fi
if has bitwise; then
    # the same G-GPU run twice: every printed loss and the final weights equal bit for bit
    for mode in "--overlap-comm 1" "--zero 1"; do
        tag="$(echo "$mode" | tr -d ' -')"
        for k in 1 2; do
            ./train -g $G $common -d $((2048 * G)) $mode -o /tmp/mg/bit_${tag}_$k >/tmp/mg/bit_${tag}_$k.log 2>&1
        done
        same_losses=$(diff <(grep -E '^step|val loss' /tmp/mg/bit_${tag}_1.log | cut -d'|' -f1-2) \
            <(grep -E '^step|val loss' /tmp/mg/bit_${tag}_2.log | cut -d'|' -f1-2) >/dev/null && echo equal || echo DIFFERENT)
        w1=$(ls /tmp/mg/bit_${tag}_1/step_*/model.safetensors 2>/dev/null | tail -1)
        w2=${w1/bit_${tag}_1/bit_${tag}_2}
        same_weights=$( [ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT)
        note "two identical $G-GPU runs $mode: losses $same_losses, final weights $same_weights ($(grep -c '^step' /tmp/mg/bit_${tag}_1.log) steps)"
    done
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
    note "$(python3 -c "$drift_py" /tmp/mg/one_$d.log /tmp/mg/nodes_0.log "-d $d, 1 GPU vs 2 nodes x 1 GPU (exit $rc0, $rc1)" $(cat /tmp/mg/floor_$d 2>/dev/null || echo 1e-3)) $(grep -m1 error /tmp/mg/nodes_*.log)"
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
    # the median of the last 30 steps' field matching $1 (by its unit: the line's columns have grown)
    col() { grep '| loss' $log | tail -30 | grep -oE "$1" | grep -oE '[0-9.]+' | sort -n | sed -n 15p; }
    local comm=$(grep '| loss' $log | tail -30 | grep -o 'comm [0-9.]*' | awk '{print $2}' | sort -n | sed -n 15p)
    local parts=$(grep '| loss' $log | tail -30 | grep -o 'fwd [0-9.]* out [0-9.]* bwd [0-9.]*' | sort -t' ' -k4 -n | sed -n 15p)
    TP_TOK=$(col '[0-9.]+ tok/s')
    note "d12 V=$V B=32/GPU $tag: median $(col '\| [0-9.]+ ms \|') ms/step, $TP_TOK tok/s, comm wait ${comm:-0} ms, $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 error $log)"
    note "    GPU ms of a step's parts (a middle step by output layer time): ${parts:-none}"
}
if has throughput || has sweep || has skew || has peers; then
    for V in $TP_VOCABS; do
        python3 tests/fixtures/gen/make_shard.py /tmp/mg/rand_$V.bin 40000000 $V random 3
        DDP_TOK=
        if has peers; then
            # the PyTorch peers, same model, B = 32 per GPU, T = 1024, random tokens
            PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 timeout 300 python3 dev/bench/bench_trainer_torch.py --vocab $V \
                --batch 32 >/tmp/mg/torch_1gpu_$V.log 2>&1
            PYTHONUNBUFFERED=1 timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node $G \
                dev/bench/bench_trainer_torch.py --vocab $V --batch 32 >/tmp/mg/torch_ddp_$V.log 2>&1
            t1=$(grep -m1 '^csv_torch_trainer' /tmp/mg/torch_1gpu_$V.log)
            tg=$(grep -m1 '^csv_torch_trainer' /tmp/mg/torch_ddp_$V.log)
            DDP_TOK=$(echo "$tg" | cut -d, -f6)
            note "PyTorch V=$V (csv: V,B,T,ms,tok/s,GB,GPUs): torch.compile 1 GPU ${t1:-failed: $(grep -m1 -i error /tmp/mg/torch_1gpu_$V.log)}; DDP ${tg:-failed: $(grep -m1 -i error /tmp/mg/torch_ddp_$V.log)}"
            [ -n "$t1" ] && [ -n "$tg" ] && note "    PyTorch DDP scaling: $(python3 -c "print(f'{float(\"${DDP_TOK}\") / float(\"$(echo "$t1" | cut -d, -f6)\"):.3f}x')")"
        fi
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
t, a, b = float('${TP_TOK:-0}'), float('${one0:-0}'), float('${one1:-0}')
ddp = float('${DDP_TOK:-0}')  # PyTorch DDP + torch.compile on G GPUs, measured in this call (peers)
if a and b:
    print(f'{t / a:.3f}x GPU 0 alone, {t / b:.3f}x GPU 1 alone, {2 * t / (a + b):.3f}x their mean'
          + (f'; {t / ddp:.3f}x PyTorch DDP' if ddp else ''))
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
            # NCCL's CTAs beside the backward take SMs from it: fewer CTAs make each reduction slower
            # but the backward shorter, and the overlap hides the slower reduction
            for ctas in ${SWEEP_CTAS:-1 2 4 8}; do
                throughput $V overlap_ctas$ctas NCCL_MAX_CTAS=$ctas NCCL_MIN_CTAS=1 ./train -g $G
                throughput $V zero1_ctas$ctas NCCL_MAX_CTAS=$ctas NCCL_MIN_CTAS=1 ./train -g $G --zero 1
            done
            throughput $V overlap_b128 ./train -g $G --bucket-mb 128
            throughput $V overlap_b128_ctas4 NCCL_MAX_CTAS=4 NCCL_MIN_CTAS=1 ./train -g $G --bucket-mb 128
            throughput $V zero1_after ./train -g $G --zero 1 --overlap-comm 0
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
    note "$(python3 -c "$losses_py" /tmp/mg/real_1.log /tmp/mg/real_$G.log "real text d12 V=262144, 1 vs $G GPUs" 1e-2) $(grep -m1 error /tmp/mg/real_*.log)"
    note "    val: $(grep 'val loss' /tmp/mg/real_1.log | tail -1 | cut -d'|' -f2) vs $(grep 'val loss' /tmp/mg/real_$G.log | tail -1 | cut -d'|' -f2); $(grep -m1 'tokenizer' /tmp/mg/real_1.log)"
fi
# Step 1's AdamW m = 0.1 g of two checkpoints, the head (argv[3] values: the table's last Vp*C for
# lm_head, argv[4] "last"; its first for a tied head's token embedding, "first") and all rows. Why
# the bounds: at step 1 both runs see the same weights, so the forward is bitwise the same; the
# split layer's lse is combined from the slices' sums, which differs from the whole row's by fp32
# rounding (~1e-7 relative). lm_head's gradient dZ^T H then differs only where a dZ rounds to bf16
# the other way: a fraction ~1e-7 / 2^-8 of the values, each by a bf16 ulp (2^-8 relative),
# relative L2 ~2^-8 sqrt(2.5e-5) ~ 2e-5: bound 1e-3. dH is summed over the slices in fp32 before
# its one bf16 rounding, so a fraction ~2^-16 of dH values differ by an ulp; each bf16 rounding in
# the backward turns a relative perturbation d into ~sqrt(d 2^-8), so after a few layers the body's
# gradients differ by ~1e-3: bound 1e-2. A tied head's rows also take the embedding's gradient,
# which is the residual stream's gradient at the bottom of that same backward (and its rows are
# summed over all ranks' tokens in one order instead of per rank then across ranks, fp32 rounding):
# the body's bound, 1e-2, for them. A real fault (a slice left out, a scale off by the rank count,
# dH not reduced or to the wrong rows, an embedding row looked up or added on the wrong rank) gives
# 0.3 and more; the bounds sit 10x to 50x above the estimates, so an estimate off by an order of
# magnitude fails no correct run.
vp_moment_py='
import struct, sys, numpy as np
def m_of(p):
    b = open(p, "rb").read()
    n = struct.unpack_from("<Q", b, 112)[0]
    return np.frombuffer(b[len(b) - 8 * n:len(b) - 4 * n], dtype=np.float32).astype(np.float64)
a, b, h, where = m_of(sys.argv[1]), m_of(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
head = slice(0, h) if where == "first" else slice(len(a) - h, len(a))
head_bound = 1e-2 if where == "first" else 1e-3
def rel(x, y): return np.linalg.norm(x - y) / np.linalg.norm(x)
ok = len(a) == len(b) and np.linalg.norm(a[head]) > 0
rh, rall = (rel(a[head], b[head]), rel(a, b)) if ok else (float("nan"), float("nan"))
ok = ok and rh <= head_bound and rall <= 1e-2
verdict = "ok" if ok else "FAIL"
print(f"{verdict}: AdamW m relative L2, head ({where} {h} values) {rh:.2e} (bound {head_bound:.0e}), all rows {rall:.2e}"
      f" (bound 1e-2); equal elements {np.mean(a[head] == b[head]) * 100 if ok else 0:.1f} % of the head,"
      f" {np.mean(a == b) * 100 if len(a) == len(b) else 0:.1f} % of all")
'
# Step argv[3]'s loss in two logs, to 2e-6 relative: a checkpoint resumed one way against the run
# that wrote it (the same weights, so the same forward up to the split lse's fp32 rounding).
step_loss_py='
import re, sys
def loss(p, k):
    m = re.search(r"^step +%d/\d+ \| loss ([0-9.]+)" % k, open(p).read(), re.M)
    return float(m.group(1)) if m else None
k = int(sys.argv[3])
a, b = loss(sys.argv[1], k), loss(sys.argv[2], k)
ok = a is not None and b is not None and abs(a - b) <= 2e-6 * abs(a)
verdict = "ok" if ok else "FAIL"
print(f"step {k} loss {b} vs {a} ({verdict}, bound 2e-6 relative)")
'
if has vocabpar; then
    vp_fail=0
    # a verdict that failed, or a run or script that stopped with an error
    vp_note() { note "$1"; case "$1" in *FAIL*|*DIFFERENT*|*rror*) vp_fail=1 ;; esac; }
    ./build/run_gpu_tests vocab_parallel >/tmp/mg/vp_gpu_tests.log 2>&1
    ./build/run_gpu_tests kernels_encoder >>/tmp/mg/vp_gpu_tests.log 2>&1
    vp_note "vocabpar GPU tests (world of one; the slice embedding kernels): $(grep -E 'passed' /tmp/mg/vp_gpu_tests.log | tr '\n' ' ')$(grep -E 'passed' /tmp/mg/vp_gpu_tests.log | grep -vq ' 0 failed' && echo ' FAIL') $(grep -m2 -A1 FAILED /tmp/mg/vp_gpu_tests.log | tr '\n' ' ')"
    d=$((8 * 128 * G))
    vp_head=$((1024 * 128)) # the head's Vp*C values
    # one model's checks: its tag, flags, and where its head lies in the table (last: lm_head; first: tied)
    vp_checks() {
        local m=$1 model=$2 where=$3
        local vp_common="$model -v 1000 -b 8 -t 128 -l 2e-3 --warmup 5 --val-every 10 --val-batches 2 -s 0 --logits-mb 0 -i /tmp/mg/train.bin -j /tmp/mg/val.bin -d $d"
        local run name flags e
        for run in "one|" "dp|-g $G" "vp|-g $G --vocab-parallel" "vp2|-g $G --vocab-parallel"; do
            IFS='|' read -r name flags <<<"$run"
            ./train $flags $vp_common -x 20 -n 10 --keep-checkpoints 3 -o /tmp/mg/vp_${m}_$name >/tmp/mg/vp_${m}_$name.log 2>&1
            echo "$m $name exit $?" >>/tmp/mg/vp_exits.log
            ./train $flags $vp_common -x 1 -o /tmp/mg/vp_${m}_step1_$name >/tmp/mg/vp_${m}_step1_$name.log 2>&1
            echo "$m $name step1 exit $?" >>/tmp/mg/vp_exits.log
            e=$(grep -m1 -h error /tmp/mg/vp_${m}_$name.log /tmp/mg/vp_${m}_step1_$name.log)
            [ -n "$e" ] && vp_note "vocabpar $m $name FAIL: $e"
            [ -f /tmp/mg/vp_${m}_step1_$name/step_00000001/state.bin ] || vp_note "vocabpar $m $name FAIL: no step 1 checkpoint"
        done
        vp_note "vocabpar $m runs: $(grep -m1 'output layer' /tmp/mg/vp_${m}_vp.log) $(grep -m1 'head slice' /tmp/mg/vp_${m}_vp.log)"
        # bound 1 on the later steps, which drift apart once a bf16 weight rounds the other way
        vp_note "$(python3 -c "$losses_py" /tmp/mg/vp_${m}_dp.log /tmp/mg/vp_${m}_vp.log "vocabpar $m: $G GPUs data parallel vs --vocab-parallel" 1)"
        vp_note "$(python3 -c "$losses_py" /tmp/mg/vp_${m}_one.log /tmp/mg/vp_${m}_vp.log "vocabpar $m: 1 GPU vs $G GPUs --vocab-parallel" 1)"
        vp_note "    val: 1 GPU $(grep 'val loss' /tmp/mg/vp_${m}_one.log | tail -1 | cut -d'|' -f2), data parallel $(grep 'val loss' /tmp/mg/vp_${m}_dp.log | tail -1 | cut -d'|' -f2), vocab parallel $(grep 'val loss' /tmp/mg/vp_${m}_vp.log | tail -1 | cut -d'|' -f2)"
        vp_note "vocabpar $m step 1's gradient, data parallel vs --vocab-parallel: $(python3 -c "$vp_moment_py" \
            /tmp/mg/vp_${m}_step1_dp/step_00000001/state.bin /tmp/mg/vp_${m}_step1_vp/step_00000001/state.bin $vp_head $where 2>&1 | tail -1)"
        vp_note "vocabpar $m step 1's gradient, 1 GPU vs --vocab-parallel: $(python3 -c "$vp_moment_py" \
            /tmp/mg/vp_${m}_step1_one/step_00000001/state.bin /tmp/mg/vp_${m}_step1_vp/step_00000001/state.bin $vp_head $where 2>&1 | tail -1)"
        # two micro-batches a step on each rank: the slice's gradient accumulates as the flat buffers do
        for run in "dp|-g $G" "vp|-g $G --vocab-parallel"; do
            IFS='|' read -r name flags <<<"$run"
            ./train $flags ${vp_common/-d $d/-d $((2 * d))} -x 1 -o /tmp/mg/vp_${m}_acc_$name >/tmp/mg/vp_${m}_acc_$name.log 2>&1
        done
        vp_note "vocabpar $m step 1's gradient over 2 micro-batches a rank, data parallel vs --vocab-parallel: $(python3 -c "$vp_moment_py" \
            /tmp/mg/vp_${m}_acc_dp/step_00000001/state.bin /tmp/mg/vp_${m}_acc_vp/step_00000001/state.bin $vp_head $where 2>&1 | tail -1) $(grep -m1 -h error /tmp/mg/vp_${m}_acc_*.log)"
        # two identical runs: every loss and the final checkpoint bit for bit (first differing line named)
        local first_diff w1 same_w full part
        first_diff=$(diff <(grep -E '^step|val loss' /tmp/mg/vp_${m}_vp.log | cut -d'|' -f1-2) \
            <(grep -E '^step|val loss' /tmp/mg/vp_${m}_vp2.log | cut -d'|' -f1-2) | grep -m2 '^[<>]' | tr '\n' ' ')
        w1=$(ls /tmp/mg/vp_${m}_vp/step_*/model.safetensors 2>/dev/null | tail -1)
        same_w=$([ -n "$w1" ] && cmp -s "$w1" "${w1/vp_${m}_vp\//vp_${m}_vp2/}" && echo equal || echo DIFFERENT)
        vp_note "vocabpar $m two identical runs: losses $([ -z "$first_diff" ] && [ -n "$w1" ] && echo equal || echo "DIFFERENT $first_diff"), final weights $same_w"
        # resume on G GPUs from step 10's checkpoint repeats steps 11-20
        full=$(grep -E '^step +(1[1-9]|20)/' /tmp/mg/vp_${m}_vp.log | cut -d'|' -f1-2)
        vp_resume "$m" vp_${m}_resume vp "-g $G --vocab-parallel" "$vp_common"
        part=$(grep -E '^step +(1[1-9]|20)/' /tmp/mg/vp_${m}_resume.log | cut -d'|' -f1-2)
        vp_note "vocabpar $m resume from step 10: steps 11-20 $([ -n "$full" ] && [ "$full" = "$part" ] && echo identical || echo "DIFFERENT $(grep -m1 error /tmp/mg/vp_${m}_resume.log)")"
        [ "$where" = first ] || return 0
        # a tied head's checkpoint holds the whole embedding: it resumes across the split and the rank count
        vp_resume "$m" vp_${m}_vp_to_one vp "" "$vp_common"
        vp_note "vocabpar $m --vocab-parallel's step 10 resumed on 1 GPU without it: $(python3 -c "$step_loss_py" /tmp/mg/vp_${m}_vp.log /tmp/mg/vp_${m}_vp_to_one.log 11) $(grep -m1 error /tmp/mg/vp_${m}_vp_to_one.log)"
        vp_resume "$m" vp_${m}_dp_to_vp dp "-g $G --vocab-parallel" "$vp_common"
        vp_note "vocabpar $m data parallelism's step 10 resumed with --vocab-parallel: $(python3 -c "$step_loss_py" /tmp/mg/vp_${m}_dp.log /tmp/mg/vp_${m}_dp_to_vp.log 11) $(grep -m1 error /tmp/mg/vp_${m}_dp_to_vp.log)"
        if [ "$G" -ge 4 ]; then
            vp_resume "$m" vp_${m}_vp_to_half vp "-g $((G / 2)) --vocab-parallel" "$vp_common"
            vp_note "vocabpar $m --vocab-parallel's step 10 resumed on $((G / 2)) GPUs with it: $(python3 -c "$step_loss_py" /tmp/mg/vp_${m}_vp.log /tmp/mg/vp_${m}_vp_to_half.log 11) $(grep -m1 error /tmp/mg/vp_${m}_vp_to_half.log)"
        fi
    }
    # model tag, the run (one|dp|vp) whose step 10 to resume, the flags to resume with, the common flags:
    # steps 11-20 into /tmp/mg/$out
    vp_resume() {
        local m=$1 out=$2 from=$3 flags=$4 common=$5
        rm -rf /tmp/mg/$out && mkdir -p /tmp/mg/$out && cp -r /tmp/mg/vp_${m}_$from/step_00000010 /tmp/mg/$out/ 2>/dev/null &&
            echo step_00000010 >/tmp/mg/$out/latest
        ./train $flags $common -x 20 -n 10 --keep-checkpoints 3 -y 1 -o /tmp/mg/$out >/tmp/mg/$out.log 2>&1
    }
    vp_checks llama_untied "--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256 --untied-head" last
    vp_checks gpt2_tied "-e tiny" first
    vp_checks qwen3_tied "--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256" first
    # at V = 262144, B = 32 per GPU: GPT-2 124M's shape as an untied Llama (12 layers, C 768, 12
    # heads), and GPT-2 124M itself, whose tied head splits with its embedding
    V=262144
    [ -f /tmp/mg/rand_$V.bin ] || python3 tests/fixtures/gen/make_shard.py /tmp/mg/rand_$V.bin 40000000 $V random 3
    for big in "untied_llama124m|--family llama --kv-heads 12 --head-dim 64 --ffn-dim 2048 --untied-head" "gpt2_124m|"; do
        IFS='|' read -r m flags <<<"$big"
        throughput $V ${m}_dp ./train -g $G $flags
        tp_dp=$TP_TOK
        # the slice layer streams (four GEMMs' work): data parallelism on the same path, for the split's own cost
        throughput $V ${m}_dp_streaming ./train -g $G $flags --logits-mb 0
        tp_dps=$TP_TOK
        throughput $V ${m}_vocabpar ./train -g $G $flags --vocab-parallel
        tp_vp=$TP_TOK
        e=$(grep -m1 error /tmp/mg/tp_${V}_${m}_vocabpar.log)
        [ -n "$e" ] || [ -z "$tp_vp" ] && vp_note "vocabpar $m run FAIL: ${e:-no step lines}"
        for tag in dp vocabpar; do
            vp_note "    memory table, $m $tag: $(grep -E 'head slice|parameters \(bf16\)|gradients \(fp32\)|vocabulary-parallel buffers|output layer workspace: fused' /tmp/mg/tp_${V}_${m}_$tag.log | tr -s ' ' | tr '\n' ';')"
        done
        vp_note "    $m --vocab-parallel against data parallel: $(python3 -c "print(f'{float(\"${tp_vp:-0}\") / float(\"${tp_dp:-0}\"):.3f}x tokens/s (default fused layer), {float(\"${tp_vp:-0}\") / float(\"${tp_dps:-0}\"):.3f}x (streaming, as the slices)')" 2>/dev/null || echo none)"
    done
fi
tar -czf "$OUT/mg_logs.tar.gz" -C /tmp/mg $(cd /tmp/mg && ls *.log)
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
[ "${vp_fail:-0}" = 0 ] || { echo "vocabpar: a verdict failed (lines with FAIL or DIFFERENT above)"; exit 1; }
