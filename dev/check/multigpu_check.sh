#!/usr/bin/env bash
# One run on a machine with two or more GPUs: data-parallel training in every mode against one GPU
# at the same global batch, two identical runs compared bit for bit, resume on G GPUs (and their
# checkpoint resumed on one GPU), a killed worker, and GPT-2 124M tokens/s on 1 and G GPUs beside
# PyTorch (torch.compile on one GPU, DDP + torch.compile on G) in the same call. Prints a summary
# last. NCCL's environment (NCCL_NVLS_ENABLE=0 where the machine sets it) is left as it is.
# SECTIONS picks parts: tests correct families bitwise nodes resume kill stop throughput peers sweep skew trace vocabpar
# real wire (default: tests correct bitwise nodes resume kill stop). TRAIN_PREBUILT=1: use ./train as it is
# (no make; the section tests still needs build/run_gpu_tests). MG_TMP: the scratch folder (default
# /tmp/mg), for two checks side by side on one host (each with its own CUDA_VISIBLE_DEVICES).
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
#     --init-from: no flag unties a head); then Qwen3-0.6B tokens/s on 1 GPU and on G (the all-reduce and ZeRO-1) and the scalings.
#   bitwise: the same G-GPU run twice (overlapped all-reduce, ZeRO-1): losses and final weights
#     must be equal bit for bit.
#   throughput: one GPU alone on each GPU, then every mode on G GPUs (ZeRO-1 after the backward
#     too), with the scaling against each GPU alone and against their mean (G GPUs move at the
#     slowest one's pace).
#   peers: PyTorch torch.compile on one GPU and DDP + torch.compile on G GPUs (dev/bench/bench_trainer_torch.py),
#     the same model, B and T as the throughput section; the throughput lines then give our
#     tokens/s against DDP's measured here.
#   skew: GPU 0 beside an independent run on GPU 1 (do they slow each other down?).
#   trace: GPU 0 alone and every rank of the default mode under a CUPTI probe, at TRACE_V (default
#     the first of TP_VOCABS): each run's step by part and its longest GEMM kernels, side by side.
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
#   real: ./train -g G -v 262144 on the default corpus (carried as inputs/corpus.tar.xz, see
#     dev/check/pack_corpus.sh) against one GPU at the same global batch.
#   wire: --grad-reduce bf16 against the fp32 wire: step 1's gradient within the bound derived in
#     model/dist/grad_sync.h (from each rank's own gradient), every mode the same bits, two runs
#     bitwise, the real section's loss curve, and tokens/s in every mode; a table last (WIRE_PARTS
#     picks its parts: see the section). Exits 1 when a verdict fails.
# MASKED=1: the tiny runs' shards (train.bin, val.bin) mark spans as no target (fine-tuning prompts).
# EXTRA: flags added to every run of the correct, bitwise, resume and vocabpar sections (e.g.
#   "--optimizer-state bf16"; their AdamW m verdicts assume fp32 state). VP_BIG=0: vocabpar without
#   its V = 262144 throughput runs.
# TP_VOCABS: vocabularies of the throughput, peers and sweep sections (default "50304 262144");
# TP_MODES: the throughput section's data-parallel modes, "tag|flags;tag|flags" (default: the all-reduce
#   after the backward and overlapped, ZeRO-1 overlapped and after the backward);
# TP_OUTPUTS: output layers of the throughput section (default fused; "fused fused:0 canonical" for all,
#   "fused:MB" passing --logits-mb MB: 0 is the fused layer's streaming path).
set -uo pipefail
OUT=${OUT:-out}
SECTIONS=${SECTIONS:-tests correct bitwise nodes resume kill stop}
TP_VOCABS=${TP_VOCABS:-50304 262144}
TP_OUTPUTS=${TP_OUTPUTS:-fused} # output layers of the throughput section ("fused canonical": both)
G=${G:-2} # GPUs to compare with one
MG=${MG_TMP:-/tmp/mg} # runs, shards and checkpoints: one folder per check running at once
mkdir -p "$OUT" $MG
summary=()
note() { summary+=("$1"); echo "$1" >>"$OUT/summary.txt"; }  # kept as we go: a timeout keeps what ran
has() { [[ " $SECTIONS " == *" $1 "* ]]; }
: >"$OUT/summary.txt"
nvidia-smi --query-gpu=index,name --format=csv,noheader
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
targets="train"
has tests && targets="train build/run_gpu_tests"
has vocabpar && targets="train build/run_gpu_tests"
has wire && targets="train build/run_gpu_tests"
has trace && targets="$targets build/kernel_trace.so"
if [ "${TRAIN_PREBUILT:-0}" != 1 ]; then
    make -j32 $targets >$MG/build.log 2>&1 || { tail -30 $MG/build.log; exit 1; }
fi
if has tests; then
    ./build/run_gpu_tests adamw >$MG/gpu_tests.log 2>&1
    ./build/run_gpu_tests backend >>$MG/gpu_tests.log 2>&1
    note "GPU tests (adamw, backend): $(grep -E 'passed' $MG/gpu_tests.log | tr '\n' ' ')$(grep -m3 FAILED $MG/gpu_tests.log)"
fi
# MASKED=1: the shards mark spans of tokens as no target, as fine-tuning prompts are (every section's
# runs then take a step's loss as the mean over all of its targets on every rank)
shard_kind=$([ "${MASKED:-0}" = 1 ] && echo pattern-masked || echo pattern)
python3 tests/fixtures/gen/make_shard.py $MG/train.bin 2000000 1000 $shard_kind 1
python3 tests/fixtures/gen/make_shard.py $MG/val.bin 100000 1000 $shard_kind 2
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
# state.bin's AdamW m as fp32: the arrays (weights, m, v) end the file, each fp32 or, from version 10,
# bf16 where the header's mask (the 4 bytes 16 before the header's end) has its bit; the mask that
# places the header's end where it names itself is the file's.
state_m_py='
def m_of(p):
    import os, struct, numpy as np
    size = os.path.getsize(p)
    with open(p, "rb") as f:
        head = f.read(120)
        version, n = struct.unpack_from("<I", head, 8)[0], struct.unpack_from("<Q", head, 112)[0]
        for mask in range(8) if version >= 10 else [0]:
            w = [2 if mask >> a & 1 else 4 for a in range(3)]
            end = size - n * sum(w)
            if end <= 128: continue
            f.seek(end - 16)
            if version < 10 or struct.unpack("<I", f.read(4))[0] == mask:
                at = end + w[0] * n
                if w[1] == 4: return np.fromfile(p, dtype=np.float32, count=n, offset=at)
                return (np.fromfile(p, dtype=np.uint16, count=n, offset=at).astype(np.uint32) << 16).view(np.float32)
    raise SystemExit(f"{p}: not a state file this script reads")
'
# AdamW's first moment after one step (m = 0.1 g, the clipped reduced gradient) of two checkpoints'
# state.bin (m_of above). The same micro-batch gradients summed
# in another order differ by a few fp32 roundings, relative L2 ~1e-7; the bound 1e-5 is far above
# that and far below any real fault (a bucket not reduced, a wrong scale: 1e-2 and more).
moment_py="$state_m_py"'
import sys, numpy as np
a, b = m_of(sys.argv[1]).astype(np.float64), m_of(sys.argv[2]).astype(np.float64)
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
common="-e tiny -v 1000 -b 8 -t 128 -x 50 -l 2e-3 --warmup 5 --val-every 25 --val-batches 2 -s 0 -i $MG/train.bin -j $MG/val.bin ${EXTRA:-}"
if has correct; then
    # one GPU accumulating G (or 2G) micro-batches against G GPUs taking one (or two) each
    for d in $((1024 * G)) $((2048 * G)); do
        ./train $common -d $d -o $MG/one_$d >$MG/one_$d.log 2>&1
        # the noise floor: the same global batch in micro-batches of 4 and of 2 (rounding only);
        # its size is the largest drift of the three pairs
        for b in 4 2; do
            ./train ${common/-b 8/-b $b} -d $d -o $MG/one_b${b}_$d >$MG/one_b${b}_$d.log 2>&1
        done
        floor=0
        for pair in "one_$d one_b4_$d" "one_$d one_b2_$d" "one_b4_$d one_b2_$d"; do
            set -- $pair
            w=$(python3 -c "$worst_py" $MG/$1.log $MG/$2.log)
            note "-d $d: noise floor $1 vs $2: $(python3 -c "$losses_py" $MG/$1.log $MG/$2.log "rounding only" 1)"
            floor=$(python3 -c "print(max($floor, float('$w')))")
        done
        echo "$floor" >$MG/floor_$d
        # one step's reduced gradient, through AdamW's first moment m = 0.1 g after step 1
        ./train $common -d $d -x 1 -o $MG/one_step1_$d >$MG/one_step1_$d.log 2>&1
        for mode in "--zero 0 --overlap-comm 1" "--zero 0 --overlap-comm 0" "--zero 1 --overlap-comm 1" "--zero 1 --overlap-comm 0"; do
            tag="$(echo "$mode" | tr -d ' -')"
            log=$MG/dp_${d}_$tag.log
            ./train -g $G $common -d $d $mode -o $MG/dp_${d}_$tag >$log 2>&1
            rc=$?
            note "$(python3 -c "$drift_py" $MG/one_$d.log $log "-d $d, 1 vs $G GPUs $mode (exit $rc)" $floor) $(grep -m1 error $log)"
            note "    val: $(grep 'val loss' $MG/one_$d.log | tail -1 | cut -d'|' -f2) vs $(grep 'val loss' $log | tail -1 | cut -d'|' -f2); comm $(grep '| loss' $log | tail -1 | grep -o 'comm [0-9.]* ms')"
            ./train -g $G $common -d $d -x 1 $mode -o $MG/dp_step1_${d}_$tag >/dev/null 2>&1
            note "    step 1's gradient: $(python3 -c "$moment_py" $MG/one_step1_$d/step_00000001/state.bin \
                $MG/dp_step1_${d}_$tag/step_00000001/state.bin 2>&1 | tail -1)"
        done
    done
    # the fused layer's other path, streaming (the runs above take its default, scaled exponentials), 1 vs G GPUs
    d=$((1024 * G)) streaming="--output fused --logits-mb 0"
    ./train $common -d $d $streaming -o $MG/one_streaming >$MG/one_streaming.log 2>&1
    ./train ${common/-b 8/-b 4} -d $d $streaming -o $MG/one_b4_streaming >$MG/one_b4_streaming.log 2>&1
    floor=$(python3 -c "$worst_py" $MG/one_streaming.log $MG/one_b4_streaming.log)
    ./train -g $G $common -d $d $streaming --zero 0 -o $MG/dp_streaming >$MG/dp_streaming.log 2>&1
    rc=$?
    note "$(python3 -c "$drift_py" $MG/one_streaming.log $MG/dp_streaming.log "-d $d, 1 vs $G GPUs $streaming (exit $rc)" $floor) $(grep -m1 error $MG/dp_streaming.log)"
    note "    --overlap-comm auto here: $(grep -m1 'data parallel:' $MG/dp_streaming.log)"
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
    fam_common="-v 1000 -b 8 -t 128 -l 2e-3 --warmup 5 --val-every 0 -s 0 -i $MG/train.bin -d $d"
    python3 -c "$untied_llama_py" $MG/untied_llama
    for fam in "qwen3|--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256" \
        "llama_untied|--init-from $MG/untied_llama"; do
        IFS='|' read -r name flags <<<"$fam"
        ./train $flags $fam_common -x 20 -o $MG/fam_one_$name >$MG/fam_one_$name.log 2>&1
        ./train $flags $fam_common -x 1 -o $MG/fam_one_step1_$name >$MG/fam_one_step1_$name.log 2>&1
        note "$name: $(grep -m1 '^family' $MG/fam_one_$name.log) $(grep -m1 error $MG/fam_one_*$name.log)"
        for mode in "--zero 0 --overlap-comm 1" "--zero 1 --overlap-comm 1"; do
            tag="$(echo "$mode" | tr -d ' -')"
            log=$MG/fam_dp_${name}_$tag.log
            ./train -g $G $flags $fam_common $mode -x 20 -o $MG/fam_dp_${name}_$tag >$log 2>&1
            rc=$?
            # bound 1 on the later steps: the verdict is step 1's 2e-6
            note "$(python3 -c "$losses_py" $MG/fam_one_$name.log $log "$name, 1 vs $G GPUs $mode (exit $rc)" 1) $(grep -m1 error $log)"
            ./train -g $G $flags $fam_common $mode -x 1 -o $MG/fam_dp_step1_${name}_$tag \
                >$MG/fam_dp_step1_${name}_$tag.log 2>&1
            note "    step 1's gradient: $(python3 -c "$moment_py" $MG/fam_one_step1_$name/step_00000001/state.bin \
                $MG/fam_dp_step1_${name}_$tag/step_00000001/state.bin 2>&1 | tail -1)"
        done
    done
    # Qwen3-0.6B, B=8, T=2048 per GPU, random tokens: median tok/s of the last 8 of 12 steps. A smoke
    # run of the path at the real shape: 8 steps swing with the pair's clocks at the power cap, so
    # the scaling figure is dev/check/families_ddp.sh's (longer runs beside PyTorch DDP)
    python3 tests/fixtures/gen/make_shard.py $MG/rand_qwen3.bin 1000000 151936 random 3
    # on G GPUs the all-reduce (--zero 0) and ZeRO-1, overlapped
    declare -A tok
    for run in "1|1|" "$G|allreduce|--zero 0 --overlap-comm 1" "$G|zero1|--zero 1 --overlap-comm 1"; do
        IFS='|' read -r g tag flags <<<"$run"
        rm -rf $MG/fam_tp # the final checkpoint of a 0.6B run: ~9 GB
        ./train -g $g $flags -e qwen3-0.6b -b 8 -t 2048 --max-seq-len 2048 -x 12 --warmup 2 --val-every 0 -s 0 \
            -i $MG/rand_qwen3.bin -o $MG/fam_tp >$MG/fam_tp_$tag.log 2>&1
        tok[$tag]=$(grep '| loss' $MG/fam_tp_$tag.log | tail -8 | grep -o '[0-9.]* tok/s' | awk '{print $1}' | sort -n | sed -n 4p)
        note "qwen3-0.6b B=8/GPU T=2048 on $g GPU(s) $flags: median ${tok[$tag]:-none} tok/s, $(grep '| loss' $MG/fam_tp_$tag.log | tail -1 | grep -o 'comm [0-9.]* ms') $(grep -m1 error $MG/fam_tp_$tag.log)"
    done
    rm -rf $MG/fam_tp
    for tag in allreduce zero1; do
        note "    qwen3-0.6b scaling, $G GPUs ($tag) against 1 (12-step smoke run; families_ddp.sh measures scaling): $(python3 -c "print(f'{float(\"${tok[$tag]:-0}\") / float(\"${tok[1]:-0}\"):.3f}x')" 2>/dev/null || echo none)"
    done
fi
if has bitwise; then
    # the same G-GPU run twice: every printed loss and the final weights equal bit for bit
    for mode in "--zero 0 --overlap-comm 1" "--zero 1 --overlap-comm 1"; do
        tag="$(echo "$mode" | tr -d ' -')"
        for k in 1 2; do
            ./train -g $G $common -d $((2048 * G)) $mode -o $MG/bit_${tag}_$k >$MG/bit_${tag}_$k.log 2>&1
        done
        same_losses=$(diff <(grep -E '^step|val loss' $MG/bit_${tag}_1.log | cut -d'|' -f1-2) \
            <(grep -E '^step|val loss' $MG/bit_${tag}_2.log | cut -d'|' -f1-2) >/dev/null && echo equal || echo DIFFERENT)
        w1=$(ls $MG/bit_${tag}_1/step_*/model.safetensors 2>/dev/null | tail -1)
        w2=${w1/bit_${tag}_1/bit_${tag}_2}
        same_weights=$( [ -n "$w1" ] && cmp -s "$w1" "$w2" && echo equal || echo DIFFERENT)
        note "two identical $G-GPU runs $mode: losses $same_losses, final weights $same_weights ($(grep -c '^step' $MG/bit_${tag}_1.log) steps)"
    done
fi
if has nodes; then
    # two launchers, as on two hosts, one GPU each, meeting at node 0's rendezvous on loopback
    d=$((1024 * G))
    [ -f $MG/one_$d.log ] || ./train $common -d $d -o $MG/one_$d >$MG/one_$d.log 2>&1
    pids=()
    for n in 0 1; do
        CUDA_VISIBLE_DEVICES=$n ./train --nodes 2 --node-rank $n --master 127.0.0.1:29517 $common -d $d \
            -o $MG/nodes_$n >$MG/nodes_$n.log 2>&1 &
        pids+=($!)
    done
    wait ${pids[0]}; rc0=$?; wait ${pids[1]}; rc1=$?
    note "$(python3 -c "$drift_py" $MG/one_$d.log $MG/nodes_0.log "-d $d, 1 GPU vs 2 nodes x 1 GPU (exit $rc0, $rc1)" $(cat $MG/floor_$d 2>/dev/null || echo 1e-3)) $(grep -m1 error $MG/nodes_*.log)"
    # a node that never shows up: node 0 alone must give up with an error, not hang
    t0=$(date +%s)
    CUDA_VISIBLE_DEVICES=0 FUSEDGPT_RENDEZVOUS_TIMEOUT=20 timeout 200 ./train --nodes 2 --node-rank 0 \
        --master 127.0.0.1:29518 $common -o $MG/nodes_alone >$MG/nodes_alone.log 2>&1
    note "node 1 never starts: node 0 exit $? after $(( $(date +%s) - t0 )) s: $(grep -m1 error $MG/nodes_alone.log)"
fi
if has resume; then
    # resume on G GPUs: 20 steps with a checkpoint at 10, then 11-20 again from it
    for mode in "--zero 0" "--zero 1"; do
        tag="$(echo "$mode" | tr -d ' -')"
        r="-g $G $common -d $((1024 * G)) -x 20 -n 10 --keep-checkpoints 3 $mode"
        ./train $r -o $MG/ra_$tag >$MG/ra_$tag.log 2>&1
        mkdir -p $MG/rb_$tag && cp -r $MG/ra_$tag/step_00000010 $MG/rb_$tag/ &&
            echo step_00000010 >$MG/rb_$tag/latest
        ./train $r -y 1 -o $MG/rb_$tag >$MG/rb_$tag.log 2>&1
        full=$(grep -E '^step +(1[1-9]|20)/' $MG/ra_$tag.log | cut -d'|' -f1-2)
        part=$(grep -E '^step +(1[1-9]|20)/' $MG/rb_$tag.log | cut -d'|' -f1-2)
        if [ -n "$full" ] && [ "$full" = "$part" ]; then note "$G-GPU resume $mode: steps 11-20 identical";
        else note "$G-GPU resume $mode: DIFFERENT ($(echo "$full" | wc -l) vs $(echo "$part" | wc -l) lines) $(grep -m1 error $MG/rb_$tag.log)"; fi
        # the same checkpoint resumed on one GPU (accumulating G): the same data, losses to rounding
        mkdir -p $MG/rc_$tag && cp -r $MG/ra_$tag/step_00000010 $MG/rc_$tag/ &&
            echo step_00000010 >$MG/rc_$tag/latest
        ./train ${r#-g $G } -y 1 -o $MG/rc_$tag >$MG/rc_$tag.log 2>&1
        grep -E '^step +(1[1-9]|20)/' $MG/ra_$tag.log >$MG/ra_tail_$tag.log
        note "$(python3 -c "$losses_py" $MG/ra_tail_$tag.log $MG/rc_$tag.log "steps 11-20, $G GPUs vs their checkpoint resumed on 1 GPU $mode") $(grep -m1 error $MG/rc_$tag.log)"
    done
fi
if has kill; then
    # a killed worker ends the run with an error naming it
    ./train -g $G $common -d $((1024 * G)) -x 100000 -o $MG/kill >$MG/kill.log 2>&1 &
    launcher=$!
    sleep 15
    victim=$(pgrep -P $launcher | tail -1)
    t0=$(date +%s)
    kill -9 "$victim"
    wait $launcher
    rc=$?
    note "killed worker pid $victim: launcher exit $rc after $(( $(date +%s) - t0 )) s: $(grep 'error' $MG/kill.log | head -3 | tr '\n' ' ')"
fi
if has stop; then
    # a stop asked for during a validation: the ranks agree batch by batch to abandon it, checkpoint the
    # steps taken and end by the signal; the resume ends where the uninterrupted run does, bit for bit.
    # SIGTERM, as a scheduler sends it: a script's background job ignores SIGINT.
    python3 tests/fixtures/gen/make_shard.py $MG/val_long.bin 8000000 1000 pattern 2
    stop_common="-e tiny -v 1000 -b 8 -t 128 -x 30 -l 2e-3 --warmup 5 -s 0 -i $MG/train.bin"
    rm -rf $MG/stop_straight $MG/stop
    ./train -g $G $stop_common --val-every 0 -o $MG/stop_straight >$MG/stop_straight.log 2>&1
    ./train -g $G $stop_common --val-every 20 --val-batches 6000 -j $MG/val_long.bin -o $MG/stop >$MG/stop.log 2>&1 &
    launcher=$!
    for i in $(seq 1200); do grep -q 'step    20/30' $MG/stop.log && break; sleep 0.05; done
    kill -TERM $launcher
    wait $launcher
    rc=$?
    ./train -g $G $stop_common --val-every 0 -y 1 -o $MG/stop >$MG/stop_resume.log 2>&1
    same=$(cmp -s $MG/stop/step_00000030/model.safetensors $MG/stop_straight/step_00000030/model.safetensors && echo same || echo DIFFERENT)
    abandoned=$(grep -c 'step    20 | validation abandoned on SIGTERM' $MG/stop.log)
    stopped=$(grep -c 'stopped by SIGTERM after step 20 of 30' $MG/stop.log)
    ok=$([ $rc = 143 ] && [ $abandoned = 1 ] && [ $stopped = 1 ] && [ -f $MG/stop/step_00000020/state.bin ] &&
        [ $same = same ] && ! grep -q 'step    20 | val loss' $MG/stop.log && echo ok || echo FAIL)
    note "stop during validation ($G ranks): launcher exit $rc, abandoned $abandoned, stopped at 20 $stopped, resumed final weights $same ($ok)"
fi
# GPT-2 124M, T=1024, B=32 per GPU (as the DDP anchors): median ms and tok/s of the last 30 of 40
# steps, and the median time a step waited on communication. $1: V, $2: tag, rest: env/flags.
throughput() {
    local V=$1 tag=$2; shift 2
    local log=$MG/tp_${V}_$tag.log
    rm -rf $MG/tp # a new run sets an earlier one aside whole: GBs of checkpoints each
    env "$@" --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 -i $MG/rand_$V.bin -o $MG/tp >$log 2>&1
    # the median of the last 30 steps' field matching $1 (by its unit: the line's columns have grown)
    col() { grep '| loss' $log | tail -30 | grep -oE "$1" | grep -oE '[0-9.]+' | sort -n | sed -n 15p; }
    local comm=$(grep '| loss' $log | tail -30 | grep -o 'comm [0-9.]*' | awk '{print $2}' | sort -n | sed -n 15p)
    # each part's median on its own: one step's three parts moved by up to 2 ms between steps
    local parts=$(for f in fwd out bwd; do echo "$f $(col "$f [0-9.]+")"; done | tr '\n' ' ')
    [ -n "$(col 'fwd [0-9.]+')" ] || parts= # a run without --step-parts lines
    TP_TOK=$(col '[0-9.]+ tok/s')
    TP_MS=$(col '\| [0-9.]+ ms \|') TP_COMM=${comm:-0}
    note "d12 V=$V B=32/GPU $tag: median $(col '\| [0-9.]+ ms \|') ms/step, $TP_TOK tok/s, comm wait ${comm:-0} ms, $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB') $(grep -m1 error $log)"
    note "    GPU ms of a step's parts (medians of the last 30): ${parts:-none}"
    grep -q 'data parallel:' $log && note "    $(grep -m1 'data parallel:' $log)"
}
if has throughput || has sweep || has skew || has peers; then
    IFS=';' read -ra tp_modes <<<"${TP_MODES:-allreduce_after|--zero 0 --overlap-comm 0;overlap|--zero 0 --overlap-comm 1;zero1|--zero 1 --overlap-comm 1;zero1_after|--zero 1 --overlap-comm 0}"
    for V in $TP_VOCABS; do
        python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 40000000 $V random 3
        DDP_TOK=
        if has peers; then
            # the PyTorch peers, same model, B = 32 per GPU, T = 1024, random tokens
            PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0 timeout 300 python3 dev/bench/bench_trainer_torch.py --vocab $V \
                --batch 32 >$MG/torch_1gpu_$V.log 2>&1
            PYTHONUNBUFFERED=1 timeout 300 python3 -m torch.distributed.run --standalone --nproc_per_node $G \
                dev/bench/bench_trainer_torch.py --vocab $V --batch 32 >$MG/torch_ddp_$V.log 2>&1
            t1=$(grep -m1 '^csv_torch_trainer' $MG/torch_1gpu_$V.log)
            tg=$(grep -m1 '^csv_torch_trainer' $MG/torch_ddp_$V.log)
            DDP_TOK=$(echo "$tg" | cut -d, -f6)
            note "PyTorch V=$V (csv: V,B,T,ms,tok/s,GB,GPUs): torch.compile 1 GPU ${t1:-failed: $(grep -m1 -i error $MG/torch_1gpu_$V.log)}; DDP ${tg:-failed: $(grep -m1 -i error $MG/torch_ddp_$V.log)}"
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
            for mode in "${tp_modes[@]}"; do
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
            rm -rf $MG/tp_side
            CUDA_VISIBLE_DEVICES=1 ./train -e d12 -v $V -b 32 -t 1024 -x 40 --warmup 5 --val-every 0 -s 0 \
                -i $MG/rand_$V.bin -o $MG/tp_side >$MG/tp_${V}_side.log 2>&1 &
            side=$!
            throughput $V 1gpu_beside_another CUDA_VISIBLE_DEVICES=0 ./train -g 1
            wait $side
        fi
        if has sweep; then
            # NCCL's CTAs beside the backward take SMs from it: fewer CTAs make each reduction slower
            # but the backward shorter, and the overlap hides the slower reduction
            for ctas in ${SWEEP_CTAS:-1 2 4 8}; do
                throughput $V overlap_ctas$ctas NCCL_MAX_CTAS=$ctas NCCL_MIN_CTAS=1 ./train -g $G --zero 0 --overlap-comm 1
                throughput $V zero1_ctas$ctas NCCL_MAX_CTAS=$ctas NCCL_MIN_CTAS=1 ./train -g $G --zero 1 --overlap-comm 1
            done
            throughput $V overlap_b128 ./train -g $G --zero 0 --overlap-comm 1 --bucket-mb 128
            throughput $V overlap_b128_ctas4 NCCL_MAX_CTAS=4 NCCL_MIN_CTAS=1 ./train -g $G --zero 0 --overlap-comm 1 --bucket-mb 128
        fi
    done
fi
if has trace; then
    # where a G-GPU step's extra time goes: GPU 0 alone and each rank of the default mode under the
    # CUPTI probe (build/kernel_trace.so), the last 5 whole steps by part, and each run's 12 longest
    # GEMM kernels with their grids (a rank that timed another cuBLASLt kernel shows it here)
    V=${TRACE_V:-${TP_VOCABS%% *}}
    [ -f $MG/rand_$V.bin ] || python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 40000000 $V random 3
    if [ ! -f build/kernel_trace.so ]; then
        note "trace: build/kernel_trace.so is missing (make build/kernel_trace.so)"
    else
        rm -rf $MG/traces && mkdir -p $MG/traces
        for run in "1gpu|-g 1" "default|-g $G"; do
            IFS='|' read -r tag flags <<<"$run"
            rm -rf $MG/tp
            CUDA_INJECTION64_PATH=$PWD/build/kernel_trace.so KERNEL_TRACE_OUT=$MG/traces/${tag}_%p.csv \
                ./train $flags --step-parts 1 -e d12 -v $V -b 32 -t 1024 -x 24 --warmup 5 --val-every 0 -s 0 \
                -i $MG/rand_$V.bin -o $MG/tp >$MG/trace_${V}_$tag.log 2>&1
            note "trace V=$V $tag: $(grep '| loss' $MG/trace_${V}_$tag.log | tail -8 | grep -oE '\| [0-9.]+ ms \|' | grep -oE '[0-9.]+' | sort -n | sed -n 4p) ms a step traced (median of the last 8) $(grep -m1 error $MG/trace_${V}_$tag.log)"
            for f in $MG/traces/${tag}_*.csv; do
                [ -s "$f" ] || continue
                # the launcher's own process initialises no GPU work: its file holds no step
                python3 dev/profile/timeline_gaps.py "$f" --steps 5 --top 0 --categories --gemms 12 \
                    >$f.txt 2>&1 || continue
                note "  $(basename $f):"
                while read -r line; do note "    $line"; done <$f.txt
            done
        done
        tar -czf $OUT/traces_$V.tar.gz -C $MG traces 2>/dev/null
    fi
fi
if has real; then
    # the check that matters: ./train -g G -v 262144 on real text, against one GPU accumulating G
    # micro-batches (same global batch, same data order); 60 steps of GPT-2 124M, B=16, T=1024
    if [ -f inputs/corpus.tar.xz ]; then mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache; fi
    r="-v 262144 -b 16 -t 1024 -x 60 --warmup 20 --val-every 30 --val-batches 4 -s 0 -d $((16384 * G))"
    ./train $r -o $MG/real_1 >$MG/real_1.log 2>&1
    ./train -g $G $r -o $MG/real_$G >$MG/real_$G.log 2>&1
    note "$(python3 -c "$losses_py" $MG/real_1.log $MG/real_$G.log "real text d12 V=262144, 1 vs $G GPUs" 1e-2) $(grep -m1 error $MG/real_*.log)"
    note "    val: $(grep 'val loss' $MG/real_1.log | tail -1 | cut -d'|' -f2) vs $(grep 'val loss' $MG/real_$G.log | tail -1 | cut -d'|' -f2); $(grep -m1 'tokenizer' $MG/real_1.log)"
fi
# ---- wire: --grad-reduce bf16 (each rank's gradients rounded once to bf16, summed in fp32 in rank
# order) against the fp32 wire. The bound (model/dist/grad_sync.h): rank r's contribution c_r (1/G
# of its micro-batch's gradient) crosses as bf16(c_r) = c_r (1 + d), |d| <= 2^-8, so per element
#   |g_bf16 - g_fp32| <= (2^-8 + 2^-16) sum_r |c_r|
# (2^-8 for the rounding; the 2^-16 covers every fp32 rounding: the two wires' sums, m = 0.1 g and
# reading c_r back, each a few 2^-24 of sum_r |c_r|). Relative to |g| alone there is no bound:
# contributions of opposite signs cancel in g and not in their rounding errors. So the check
# measures each rank's own gradient: one GPU takes the G micro-batches of step 1 as G steps of
# learning rate 1e-30 (no weight moves: a zero-initialised bias becomes 1e-30, absorbed by any
# activation above 1e-23), checkpointed after each: with m_k AdamW's m after step k (m_0 = 0),
# rank r's c_r = (m_(r+1) - 0.9 m_r) / 0.1 / G.
# Verdicts, on the tiny model (checkpoints after step 1, no clipping, every mode):
#   - step 1's loss and lse printed the same for both wires (the forward is the same);
#   - the per-rank gradients add up to the fp32 wire's (1e-4 relative; ~1e-7 expected): else the
#     check itself is broken (another data order) and says so;
#   - ||m_bf16 - m_fp32|| <= 0.1 (2^-8 + 2^-16) ||sum_r |c_r| || (rigorous: the L2 norm of the
#     per-element bound). Expected: ~0.42 2^-8 ~ 1.7e-3 of sqrt(sum_r ||c_r||^2) (rounding errors
#     uniform within half an ulp, independent across ranks);
#   - one rounding a rank, summed in fp32: m_bf16 against fp32(sum_r bf16(c_r)) in rank order,
#     computed here, within 3e-4 of ||g|| (c_r read back to ~1e-7 flips a rounding for ~2e-5 of the
#     values: ~5e-6 in a simulation of the read-back; no rounding, or a second one, gives ~1e-3);
#   - every mode's bf16 gradient the same bits (an element's sum does not depend on how the
#     buckets are cut), except the embedding rows of the overlapped all-reduce: there the wire
#     carries each rank's output-layer part alone (the encoder's is added after, in fp32), which
#     the checkpoints cannot separate, so those rows are held to 1e-2 relative (an encoder's part
#     lost or counted twice, a bucket not reduced: a rank's whole share) and left out of the bound
#     and the one-rounding verdicts.
# rounds: GPT-2 124M (V 50304, B 4, T 256), whose buckets take several rounds of the wire (16M
#   values each), after the backward (the whole layout as one bucket) and ZeRO-1 (per bucket): the
#   two bf16 gradients the same bits, and each within the bound from the per-rank norms the log
#   prints, ||m_bf16 - m_fp32|| <= 0.1 (2^-8 + 2^-16) sqrt(G sum_r ||c_r||^2) (Cauchy-Schwarz over ranks).
# bitwise: two identical bf16 runs (overlapped, ZeRO-1; 50 steps, two micro-batches a rank).
# real: the real section's run (d12, V 262144, B 16, T 1024, 60 steps) with the bf16 wire against
#   the fp32 wire, beside the rounding-only pair (1 vs G GPUs, fp32): largest per-step difference
#   and the mean over steps 41-60. Verdict: the bf16 run not worse by more than 0.02 on average
#   over steps 41-60 (the 1 vs 2 GPU pair of 2026-11-22 differed by 0.0036 there; chaotic drift,
#   one sample, so the largest difference is printed, not judged).
# throughput: GPT-2 124M, B 32 per GPU, each of TP_VOCABS, every mode with each wire, scaling
#   against the mean of each GPU alone. WIRE_PARTS picks parts (default: step1 rounds bitwise real
#   throughput); each run is under a timeout (WIRE_TIMEOUT, 420 s). On two H100s, about: step1
#   2 min, rounds 2 min, bitwise 1 min, real 2 min (plus the corpus's preparation the first time),
#   throughput 3-4 min a vocabulary: split the parts over calls of 10 minutes.
wire_mpy="$state_m_py"'
import numpy as np
B1 = np.float32(0.9)
C1 = float(np.float32(1) - B1)  # AdamW: m = 0.9 m + (1 - 0.9) g in fp32
def norm(x): return float(np.linalg.norm(x))
def bf16(x):  # fp32 to the nearest bf16, ties to even (finite values)
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32)
'
# argv: mode fp32_state bf16_state G E rank_run_dir. E: rows [0, E) held to 1e-2 only (0: none).
wire_step1_py="$wire_mpy"'
import sys
mode, fa, fb, G, E, ranks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
ga, gb = m_of(fa).astype(np.float64) / C1, m_of(fb).astype(np.float64) / C1
prev, c = 0.0, []
for k in range(1, G + 1):
    m = m_of(f"{ranks}/step_{k:08d}/state.bin").astype(np.float64)
    c.append(((m - float(B1) * prev) / C1 / G).astype(np.float32))
    prev = m
s = slice(E, None)
add_up = norm(sum(x.astype(np.float64) for x in c) - ga) / norm(ga)
pred = bf16(c[0])
for x in c[1:]: pred = pred + bf16(x)  # fp32, rank order
abs_sum = sum(np.abs(x.astype(np.float64)) for x in c)
err, bound = norm(gb[s] - ga[s]), (2**-8 + 2**-16) * norm(abs_sum[s])
expect = 0.42 * 2**-8 * np.sqrt(sum(norm(x[s].astype(np.float64)) ** 2 for x in c))
once = norm(gb[s] - pred[s]) / norm(ga[s])
ok = add_up <= 1e-4 and err <= bound and once <= 3e-4 and err > 0
emb = ""
if E:
    rel = norm(gb[:E] - ga[:E]) / norm(ga[:E])
    ok = ok and rel <= 1e-2
    emb = f"; embedding rows {rel:.2e} relative (bound 1e-2)"
verdict = "ok" if ok else "FAIL"
print(f"{verdict}: {mode}: |g_bf16 - g_fp32| {err:.3e} = {err / bound:.2f} of the bound {bound:.3e}"
      f" (expected ~{expect:.1e}; {err / norm(ga[s]):.2e} of |g|); one rounding a rank {once:.1e} (bound 3e-4);"
      f" the ranks add up to the fp32 wire to {add_up:.1e} (bound 1e-4){emb}")
print(f"ROW|{err / norm(ga[s]):.2e}|{err / bound:.2f}|{once:.1e}|{verdict}")
'
# argv: E state... : every state's m the same bits as the first's, rows [E, n) for those after ";"
wire_same_py="$wire_mpy"'
import sys
ref, out = m_of(sys.argv[2]).view(np.uint32), []
E, tail = int(sys.argv[1]), False
for p in sys.argv[3:]:
    if p == ";":
        tail = True
        continue
    x = m_of(p).view(np.uint32)
    a, b = (x[E:], ref[E:]) if tail else (x, ref)
    same = "equal" if len(a) == len(b) and np.array_equal(a, b) else "DIFFERENT"
    out.append(p.split("/")[-3] + (" beyond the embeddings " if tail else " ") + same)
print(", ".join(out))
'
# argv: mode fp32_state bf16_state G rank_log: the bound from each rank's gradient norm as printed
wire_norm_py="$wire_mpy"'
import re, sys
mode, fa, fb, G = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
norms = [float(x) for x in re.findall(r"^step +\d+/\d+ \|.*?\| norm ([0-9.]+)", open(sys.argv[5]).read(), re.M)][:G]
ga, gb = m_of(fa).astype(np.float64) / C1, m_of(fb).astype(np.float64) / C1
cn = [(x + 1e-4) / G for x in norms]  # the log prints 4 decimals
bound = (2**-8 + 2**-16) * np.sqrt(G * sum(x * x for x in cn))
err = norm(gb - ga)
ok = len(norms) == G and 0 < err <= bound
verdict = "ok" if ok else "FAIL"
expect = 0.42 * 2**-8 * np.sqrt(sum(x * x for x in cn))
print(f"{verdict}: {mode}: |g_bf16 - g_fp32| {err:.3e} = {err / bound:.2f} of the bound {bound:.3e} from the norms"
      f" of the ranks {norms} (expected ~{expect:.1e}; {err / norm(ga):.2e} of |g|)")
print(f"ROW|{err / norm(ga):.2e}|{err / bound:.2f}|-|{verdict}")
'
# argv: fp32_log bf16_log one_gpu_log: the loss curves, bf16 against fp32 beside 1 against G GPUs
wire_real_py='
import math, re, sys
def losses(p):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
def val(p):
    v = re.findall(r"val loss ([0-9.]+)", open(p).read())
    return v[-1] if v else None
f, b, one = losses(sys.argv[1]), losses(sys.argv[2]), losses(sys.argv[3])
def cmp(x, y):
    if not x or len(x) != len(y): return None
    d = [q - p for p, q in zip(x, y)]
    k = max(range(len(d)), key=lambda i: abs(d[i]))
    late = d[-20:]
    return abs(d[k]), k + 1, sum(late) / len(late), sum(abs(t) for t in late) / len(late)
w, r = cmp(f, b), cmp(one, f)
ok = w is not None and len(f) == 60 and all(math.isfinite(t) for t in b) and w[2] <= 0.02
verdict = "ok" if ok else "FAIL"
fl = f"largest {r[0]:.2e} (step {r[1]}), mean |difference| over the last 20 steps {r[3]:.2e}" if r else "none"
if w:
    print(f"{verdict}: real text d12 V=262144 on {sys.argv[4]} GPUs, bf16 vs fp32 wire: largest |loss difference|"
          f" {w[0]:.2e} (step {w[1]}), mean over the last 20 steps {w[2]:+.2e} (bf16 - fp32, bound +0.02), mean"
          f" |difference| {w[3]:.2e}; rounding-only floor, 1 vs {sys.argv[4]} GPUs, fp32: {fl}; final {f[-1]} vs"
          f" {b[-1]}, val {val(sys.argv[1])} vs {val(sys.argv[2])}")
    print(f"ROW|{w[0]:.2e}|{w[2]:+.2e}|{r[0] if r else -1:.2e}|{verdict}")
else:
    print(f"FAIL: real text, bf16 vs fp32 wire: {len(f)} vs {len(b)} steps")
'
if has wire; then
    wire_fail=0
    wire_rows=()
    # a verdict that failed, or a run or script that stopped with an error
    w_note() { note "$1"; case "$1" in *FAIL*|*DIFFERENT*|*rror*) wire_fail=1 ;; esac; }
    wt() { timeout "${WIRE_TIMEOUT:-420}" "$@"; }
    WIRE_PARTS=${WIRE_PARTS:-step1 rounds bitwise real throughput}
    wpart() { [[ " $WIRE_PARTS " == *" $1 "* ]]; }
    # a python verdict: its last line to the summary (after $2), its ROW line to the table as "$1|..."
    w_py() {
        local label=$1 prefix=$2 out row
        shift 2
        out=$(python3 -c "$@" 2>&1)
        w_note "$prefix$(grep -v '^ROW' <<<"$out" | tail -1)"
        row=$(grep -m1 '^ROW' <<<"$out" | cut -d'|' -f2-)
        [ -z "$label" ] || wire_rows+=("$label|${row:-||||FAIL}")
    }
    wire_modes=("overlap|--zero 0 --overlap-comm 1" "after|--zero 0 --overlap-comm 0" "zero1|--zero 1 --overlap-comm 1" "zero1_after|--zero 1 --overlap-comm 0")
    ./build/run_gpu_tests grad_wire >$MG/wire_gpu_tests.log 2>&1
    w_note "wire GPU tests (world of one): $(grep -E 'passed' $MG/wire_gpu_tests.log | tail -1)$(grep -q ' 0 failed' $MG/wire_gpu_tests.log || echo ' FAIL') $(grep -m2 -A1 FAILED $MG/wire_gpu_tests.log | tr '\n' ' ')"
    if wpart step1; then
        wire_rows+=("step 1|mode|bf16 - fp32, over norm g|of the bound|one rounding|verdict")
        # each rank's own gradient: one GPU takes step 1's G micro-batches as G steps that move nothing
        rm -rf $MG/wire_ranks
        wt ./train $common -d 1024 -x $G -l 1e-30 --lr-final 0 --warmup 0 --weight-decay 0 --grad-clip 0 --val-every 0 \
            -n 1 --keep-checkpoints $((G + 1)) -o $MG/wire_ranks >$MG/wire_ranks.log 2>&1 ||
            w_note "wire ranks' gradients FAIL: exit $? $(grep -m1 error $MG/wire_ranks.log)"
        # the embedding rows: wte (Vp x C) and wpe (maxT x C) lead the layout
        E=$(grep -m1 '^model:' $MG/wire_ranks.log | sed -E 's/.*C=([0-9]+) maxT=([0-9]+) .*padded ([0-9]+)\).*/\1 \2 \3/' |
            awk '{print $1 * ($2 + $3)}')
        for mode in "${wire_modes[@]}"; do
            IFS='|' read -r tag flags <<<"$mode"
            for wire in fp32 bf16; do
                rm -rf $MG/wire1_${tag}_$wire
                wt ./train -g $G $common -d $((1024 * G)) -x 1 --grad-clip 0 --val-every 0 $flags --grad-reduce $wire \
                    -o $MG/wire1_${tag}_$wire >$MG/wire1_${tag}_$wire.log 2>&1 ||
                    w_note "wire step 1 $tag $wire FAIL: exit $? $(grep -m1 error $MG/wire1_${tag}_$wire.log)"
            done
            l32=$(grep -m1 -E '^step +1/' $MG/wire1_${tag}_fp32.log | cut -d'|' -f2-3)
            l16=$(grep -m1 -E '^step +1/' $MG/wire1_${tag}_bf16.log | cut -d'|' -f2-3)
            w_note "wire step 1, $tag: fp32 wire$l32, bf16 wire$l16: $([ -n "$l32" ] && [ "$l32" = "$l16" ] && echo equal || echo DIFFERENT)"
            [ $tag = overlap ] && e=$E || e=0
            w_py "step 1, tiny|$tag" "    " "$wire_step1_py" $tag $MG/wire1_${tag}_fp32/step_00000001/state.bin \
                $MG/wire1_${tag}_bf16/step_00000001/state.bin $G $e $MG/wire_ranks
            grep -q '^gradient reduce: bf16 on the wire' $MG/wire1_${tag}_bf16.log ||
                w_note "wire $tag: FAIL: the bf16 run's header does not name the wire"
        done
        w_py "" "wire step 1, every mode's bf16 gradient against after-the-backward's: " "$wire_same_py" $E \
            $MG/wire1_after_bf16/step_00000001/state.bin $MG/wire1_zero1_bf16/step_00000001/state.bin \
            $MG/wire1_zero1_after_bf16/step_00000001/state.bin ';' $MG/wire1_overlap_bf16/step_00000001/state.bin
    fi
    if wpart rounds; then
        wire_rows+=("step 1|mode|bf16 - fp32, over norm g|of the bound||verdict")
        V=50304
        [ -f $MG/rand_$V.bin ] || python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 40000000 $V random 3
        big="-e d12 -v $V -b 4 -t 256 --grad-clip 0 --val-every 0 -s 0 -i $MG/rand_$V.bin"
        rm -rf $MG/wire_big_ranks
        wt ./train $big -d 1024 -x $G -l 1e-30 --lr-final 0 --warmup 0 --weight-decay 0 -o $MG/wire_big_ranks \
            >$MG/wire_big_ranks.log 2>&1 || w_note "wire rounds, ranks' norms FAIL: exit $? $(grep -m1 error $MG/wire_big_ranks.log)"
        rm -rf $MG/wire_big_ranks
        for mode in "after|--zero 0 --overlap-comm 0" "zero1|--zero 1 --overlap-comm 1"; do
            IFS='|' read -r tag flags <<<"$mode"
            for wire in fp32 bf16; do
                rm -rf $MG/wire_big_${tag}_$wire
                wt ./train -g $G $big -d $((1024 * G)) -x 1 $flags --grad-reduce $wire -o $MG/wire_big_${tag}_$wire \
                    >$MG/wire_big_${tag}_$wire.log 2>&1 ||
                    w_note "wire rounds $tag $wire FAIL: exit $? $(grep -m1 error $MG/wire_big_${tag}_$wire.log)"
            done
            w_py "step 1, d12|$tag" "wire rounds (d12, V=$V, buckets of several 16M-value rounds): " "$wire_norm_py" $tag \
                $MG/wire_big_${tag}_fp32/step_00000001/state.bin $MG/wire_big_${tag}_bf16/step_00000001/state.bin \
                $G $MG/wire_big_ranks.log
        done
        w_py "" "wire rounds, the bf16 gradient after the backward (one bucket) and under ZeRO-1 (per bucket): " \
            "$wire_same_py" 0 $MG/wire_big_after_bf16/step_00000001/state.bin $MG/wire_big_zero1_bf16/step_00000001/state.bin
        rm -rf $MG/wire_big_*/ # GBs of checkpoints (the logs stay)
    fi
    if wpart bitwise; then
        wire_rows+=("bf16 repeat|mode|two identical runs|||verdict")
        for mode in "overlap|--zero 0 --overlap-comm 1" "zero1|--zero 1 --overlap-comm 1"; do
            IFS='|' read -r tag flags <<<"$mode"
            for k in 1 2; do
                rm -rf $MG/wire_bit_${tag}_$k
                wt ./train -g $G $common -d $((2048 * G)) $flags --grad-reduce bf16 -o $MG/wire_bit_${tag}_$k \
                    >$MG/wire_bit_${tag}_$k.log 2>&1 || w_note "wire bitwise $tag run $k FAIL: exit $? $(grep -m1 error $MG/wire_bit_${tag}_$k.log)"
            done
            first_diff=$(diff <(grep -E '^step|val loss' $MG/wire_bit_${tag}_1.log | cut -d'|' -f1-2) \
                <(grep -E '^step|val loss' $MG/wire_bit_${tag}_2.log | cut -d'|' -f1-2) | grep -m2 '^[<>]' | tr '\n' ' ')
            w1=$(ls $MG/wire_bit_${tag}_1/step_*/model.safetensors 2>/dev/null | tail -1)
            same_w=$([ -n "$w1" ] && cmp -s "$w1" "${w1/wire_bit_${tag}_1/wire_bit_${tag}_2}" && echo equal || echo DIFFERENT)
            n=$(grep -c '^step' $MG/wire_bit_${tag}_1.log)
            w_note "wire two identical bf16 runs, $tag: losses $([ -z "$first_diff" ] && [ "$n" -gt 0 ] && echo equal || echo "DIFFERENT $first_diff"), final weights $same_w ($n step lines)"
            wire_rows+=("repeat|$tag|losses $([ -z "$first_diff" ] && echo equal || echo DIFFERENT), weights $same_w|||$([ -z "$first_diff" ] && [ $same_w = equal ] && echo ok || echo FAIL)")
        done
    fi
    if wpart real; then
        if [ -f inputs/corpus.tar.xz ]; then mkdir -p .cache && tar -xJf inputs/corpus.tar.xz -C .cache; fi
        r="-v 262144 -b 16 -t 1024 -x 60 --warmup 20 --val-every 30 --val-batches 4 -s 0 -d $((16384 * G))"
        # the real section's two runs, when it ran in this call
        for run in "1|" "$G|-g $G"; do
            IFS='|' read -r name flags <<<"$run"
            n=$(grep -cE '^step +[0-9]+/' $MG/real_$name.log 2>/dev/null)
            [ "${n:-0}" -ge 60 ] || wt ./train $flags $r -o $MG/real_$name >$MG/real_$name.log 2>&1
        done
        wt ./train -g $G $r --grad-reduce bf16 -o $MG/real_${G}_bf16 >$MG/real_${G}_bf16.log 2>&1
        e=$(grep -m1 -h error $MG/real_1.log $MG/real_$G.log $MG/real_${G}_bf16.log)
        [ -z "$e" ] || w_note "wire real text FAIL: $e"
        wire_rows+=("real text|bf16 vs fp32|largest difference|mean, steps 41-60|floor's largest|verdict")
        w_py "real text|60 steps" "" "$wire_real_py" $MG/real_$G.log $MG/real_${G}_bf16.log $MG/real_1.log $G
        rm -rf $MG/real_${G}_bf16
    fi
    if wpart throughput; then
        wire_rows+=("GPT-2 124M|mode, wire|ms/step|tokens/s|scaling|comm wait")
        for V in $TP_VOCABS; do
            [ -f $MG/rand_$V.bin ] || python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 40000000 $V random 3
            throughput $V wire_1gpu timeout 300 ./train -g 1
            one0=$TP_TOK
            throughput $V wire_1gpu_on_gpu1 CUDA_VISIBLE_DEVICES=1 timeout 300 ./train -g 1
            one1=$TP_TOK
            for mode in "${wire_modes[@]}"; do
                IFS='|' read -r tag flags <<<"$mode"
                for wire in fp32 bf16; do
                    throughput $V wire_${tag}_$wire timeout 300 ./train -g $G $flags --grad-reduce $wire
                    [ -n "$TP_TOK" ] || w_note "wire throughput V=$V $tag $wire FAIL: no step lines"
                    scale=$(python3 -c "
t, a, b = float('${TP_TOK:-0}'), float('${one0:-0}'), float('${one1:-0}')
print(f'{2 * t / (a + b):.3f}x' if a and b and t else 'none')" 2>/dev/null)
                    note "    scaling against the mean of each GPU alone: ${scale:-none}"
                    wire_rows+=("V=$V|$tag $wire|${TP_MS:-none} ms|${TP_TOK:-none} tok/s|$scale|comm ${TP_COMM:-none} ms")
                done
            done
        done
    fi
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
vp_moment_py="$state_m_py"'
import sys, numpy as np
a, b, h, where = m_of(sys.argv[1]).astype(np.float64), m_of(sys.argv[2]).astype(np.float64), int(sys.argv[3]), sys.argv[4]
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
    ./build/run_gpu_tests vocab_parallel >$MG/vp_gpu_tests.log 2>&1
    ./build/run_gpu_tests kernels_encoder >>$MG/vp_gpu_tests.log 2>&1
    vp_note "vocabpar GPU tests (world of one; the slice embedding kernels): $(grep -E 'passed' $MG/vp_gpu_tests.log | tr '\n' ' ')$(grep -E 'passed' $MG/vp_gpu_tests.log | grep -vq ' 0 failed' && echo ' FAIL') $(grep -m2 -A1 FAILED $MG/vp_gpu_tests.log | tr '\n' ' ')"
    d=$((8 * 128 * G))
    vp_head=$((1024 * 128)) # the head's Vp*C values
    # one model's checks: its tag, flags, and where its head lies in the table (last: lm_head; first: tied)
    vp_checks() {
        local m=$1 model=$2 where=$3
        local vp_common="$model -v 1000 -b 8 -t 128 -l 2e-3 --warmup 5 --val-every 10 --val-batches 2 -s 0 --logits-mb 0 -i $MG/train.bin -j $MG/val.bin -d $d ${EXTRA:-}"
        local run name flags e
        for run in "one|" "dp|-g $G --zero 0" "vp|-g $G --vocab-parallel" "vp2|-g $G --vocab-parallel"; do
            IFS='|' read -r name flags <<<"$run"
            ./train $flags $vp_common -x 20 -n 10 --keep-checkpoints 3 -o $MG/vp_${m}_$name >$MG/vp_${m}_$name.log 2>&1
            echo "$m $name exit $?" >>$MG/vp_exits.log
            ./train $flags $vp_common -x 1 -o $MG/vp_${m}_step1_$name >$MG/vp_${m}_step1_$name.log 2>&1
            echo "$m $name step1 exit $?" >>$MG/vp_exits.log
            e=$(grep -m1 -h error $MG/vp_${m}_$name.log $MG/vp_${m}_step1_$name.log)
            [ -n "$e" ] && vp_note "vocabpar $m $name FAIL: $e"
            [ -f $MG/vp_${m}_step1_$name/step_00000001/state.bin ] || vp_note "vocabpar $m $name FAIL: no step 1 checkpoint"
        done
        vp_note "vocabpar $m runs: $(grep -m1 'output layer' $MG/vp_${m}_vp.log) $(grep -m1 'head slice' $MG/vp_${m}_vp.log)"
        # bound 1 on the later steps, which drift apart once a bf16 weight rounds the other way
        vp_note "$(python3 -c "$losses_py" $MG/vp_${m}_dp.log $MG/vp_${m}_vp.log "vocabpar $m: $G GPUs data parallel vs --vocab-parallel" 1)"
        vp_note "$(python3 -c "$losses_py" $MG/vp_${m}_one.log $MG/vp_${m}_vp.log "vocabpar $m: 1 GPU vs $G GPUs --vocab-parallel" 1)"
        vp_note "    val: 1 GPU $(grep 'val loss' $MG/vp_${m}_one.log | tail -1 | cut -d'|' -f2), data parallel $(grep 'val loss' $MG/vp_${m}_dp.log | tail -1 | cut -d'|' -f2), vocab parallel $(grep 'val loss' $MG/vp_${m}_vp.log | tail -1 | cut -d'|' -f2)"
        vp_note "vocabpar $m step 1's gradient, data parallel vs --vocab-parallel: $(python3 -c "$vp_moment_py" \
            $MG/vp_${m}_step1_dp/step_00000001/state.bin $MG/vp_${m}_step1_vp/step_00000001/state.bin $vp_head $where 2>&1 | tail -1)"
        vp_note "vocabpar $m step 1's gradient, 1 GPU vs --vocab-parallel: $(python3 -c "$vp_moment_py" \
            $MG/vp_${m}_step1_one/step_00000001/state.bin $MG/vp_${m}_step1_vp/step_00000001/state.bin $vp_head $where 2>&1 | tail -1)"
        # two micro-batches a step on each rank: the slice's gradient accumulates as the flat buffers do
        for run in "dp|-g $G --zero 0" "vp|-g $G --vocab-parallel"; do
            IFS='|' read -r name flags <<<"$run"
            ./train $flags ${vp_common/-d $d/-d $((2 * d))} -x 1 -o $MG/vp_${m}_acc_$name >$MG/vp_${m}_acc_$name.log 2>&1
        done
        vp_note "vocabpar $m step 1's gradient over 2 micro-batches a rank, data parallel vs --vocab-parallel: $(python3 -c "$vp_moment_py" \
            $MG/vp_${m}_acc_dp/step_00000001/state.bin $MG/vp_${m}_acc_vp/step_00000001/state.bin $vp_head $where 2>&1 | tail -1) $(grep -m1 -h error $MG/vp_${m}_acc_*.log)"
        # two identical runs: every loss and the final checkpoint bit for bit (first differing line named)
        local first_diff w1 same_w full part
        first_diff=$(diff <(grep -E '^step|val loss' $MG/vp_${m}_vp.log | cut -d'|' -f1-2) \
            <(grep -E '^step|val loss' $MG/vp_${m}_vp2.log | cut -d'|' -f1-2) | grep -m2 '^[<>]' | tr '\n' ' ')
        w1=$(ls $MG/vp_${m}_vp/step_*/model.safetensors 2>/dev/null | tail -1)
        same_w=$([ -n "$w1" ] && cmp -s "$w1" "${w1/vp_${m}_vp\//vp_${m}_vp2/}" && echo equal || echo DIFFERENT)
        vp_note "vocabpar $m two identical runs: losses $([ -z "$first_diff" ] && [ -n "$w1" ] && echo equal || echo "DIFFERENT $first_diff"), final weights $same_w"
        # resume on G GPUs from step 10's checkpoint repeats steps 11-20
        full=$(grep -E '^step +(1[1-9]|20)/' $MG/vp_${m}_vp.log | cut -d'|' -f1-2)
        vp_resume "$m" vp_${m}_resume vp "-g $G --vocab-parallel" "$vp_common"
        part=$(grep -E '^step +(1[1-9]|20)/' $MG/vp_${m}_resume.log | cut -d'|' -f1-2)
        vp_note "vocabpar $m resume from step 10: steps 11-20 $([ -n "$full" ] && [ "$full" = "$part" ] && echo identical || echo "DIFFERENT $(grep -m1 error $MG/vp_${m}_resume.log)")"
        [ "$where" = first ] || return 0
        # a tied head's checkpoint holds the whole embedding: it resumes across the split and the rank count
        vp_resume "$m" vp_${m}_vp_to_one vp "" "$vp_common"
        vp_note "vocabpar $m --vocab-parallel's step 10 resumed on 1 GPU without it: $(python3 -c "$step_loss_py" $MG/vp_${m}_vp.log $MG/vp_${m}_vp_to_one.log 11) $(grep -m1 error $MG/vp_${m}_vp_to_one.log)"
        vp_resume "$m" vp_${m}_dp_to_vp dp "-g $G --vocab-parallel" "$vp_common"
        vp_note "vocabpar $m data parallelism's step 10 resumed with --vocab-parallel: $(python3 -c "$step_loss_py" $MG/vp_${m}_dp.log $MG/vp_${m}_dp_to_vp.log 11) $(grep -m1 error $MG/vp_${m}_dp_to_vp.log)"
        if [ "$G" -ge 4 ]; then
            vp_resume "$m" vp_${m}_vp_to_half vp "-g $((G / 2)) --vocab-parallel" "$vp_common"
            vp_note "vocabpar $m --vocab-parallel's step 10 resumed on $((G / 2)) GPUs with it: $(python3 -c "$step_loss_py" $MG/vp_${m}_vp.log $MG/vp_${m}_vp_to_half.log 11) $(grep -m1 error $MG/vp_${m}_vp_to_half.log)"
        fi
    }
    # model tag, the run (one|dp|vp) whose step 10 to resume, the flags to resume with, the common flags:
    # steps 11-20 into $MG/$out
    vp_resume() {
        local m=$1 out=$2 from=$3 flags=$4 common=$5
        rm -rf $MG/$out && mkdir -p $MG/$out && cp -r $MG/vp_${m}_$from/step_00000010 $MG/$out/ 2>/dev/null &&
            echo step_00000010 >$MG/$out/latest
        ./train $flags $common -x 20 -n 10 --keep-checkpoints 3 -y 1 -o $MG/$out >$MG/$out.log 2>&1
    }
    vp_checks llama_untied "--family llama --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256 --untied-head" last
    vp_checks gpt2_tied "-e tiny" first
    vp_checks qwen3_tied "--family qwen3 --layers 2 --dim 128 --heads 2 --kv-heads 1 --head-dim 64 --ffn-dim 256" first
    # at V = 262144, B = 32 per GPU: GPT-2 124M's shape as an untied Llama (12 layers, C 768, 12
    # heads), and GPT-2 124M itself, whose tied head splits with its embedding
    V=262144
    [ "${VP_BIG:-1}" = 0 ] || [ -f $MG/rand_$V.bin ] || python3 tests/fixtures/gen/make_shard.py $MG/rand_$V.bin 40000000 $V random 3
    for big in "untied_llama124m|--family llama --kv-heads 12 --head-dim 64 --ffn-dim 2048 --untied-head" "gpt2_124m|"; do
        [ "${VP_BIG:-1}" = 0 ] && break
        IFS='|' read -r m flags <<<"$big"
        throughput $V ${m}_dp ./train -g $G $flags --zero 0
        tp_dp=$TP_TOK
        # the slice layer streams (four GEMMs' work): data parallelism on the same path, for the split's own cost
        throughput $V ${m}_dp_streaming ./train -g $G $flags --zero 0 --logits-mb 0
        tp_dps=$TP_TOK
        throughput $V ${m}_vocabpar ./train -g $G $flags --vocab-parallel
        tp_vp=$TP_TOK
        e=$(grep -m1 error $MG/tp_${V}_${m}_vocabpar.log)
        [ -n "$e" ] || [ -z "$tp_vp" ] && vp_note "vocabpar $m run FAIL: ${e:-no step lines}"
        for tag in dp vocabpar; do
            vp_note "    memory table, $m $tag: $(grep -E 'head slice|parameters \(bf16\)|gradients \(fp32\)|vocabulary-parallel buffers|output layer workspace: fused' $MG/tp_${V}_${m}_$tag.log | tr -s ' ' | tr '\n' ';')"
        done
        vp_note "    $m --vocab-parallel against data parallel: $(python3 -c "print(f'{float(\"${tp_vp:-0}\") / float(\"${tp_dp:-0}\"):.3f}x tokens/s (default fused layer), {float(\"${tp_vp:-0}\") / float(\"${tp_dps:-0}\"):.3f}x (streaming, as the slices)')" 2>/dev/null || echo none)"
    done
fi
tar -czf "$OUT/mg_logs.tar.gz" -C $MG $(cd $MG && ls *.log)
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
if [ -n "${wire_rows+x}" ]; then
    echo
    echo "==== wire: --grad-reduce bf16 against fp32 on $G GPUs ===="
    for row in "${wire_rows[@]}"; do
        IFS='|' read -r a b c d e f <<<"$row"
        printf '%-12s %-20s %-28s %-18s %-14s %s\n' "$a" "$b" "$c" "$d" "$e" "$f"
    done
fi
[ "${vp_fail:-0}" = 0 ] || { echo "vocabpar: a verdict failed (lines with FAIL or DIFFERENT above)"; exit 1; }
[ "${wire_fail:-0}" = 0 ] || { echo "wire: a verdict failed (lines with FAIL or DIFFERENT above)"; exit 1; }
