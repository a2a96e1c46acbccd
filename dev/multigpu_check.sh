#!/usr/bin/env bash
# One call on a machine with two or more GPUs (the nvidia-h200-x2 kind): data-parallel training
# against one GPU at the same global batch, resume on 2 GPUs, a killed worker, and GPT-2 124M
# tokens/s on 1 and 2 GPUs. Prints a summary last. NCCL's environment (NCCL_NVLS_ENABLE=0 on the
# lent machines) is left as the machine sets it.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT" /tmp/mg
summary=()
note() { summary+=("$1"); echo "$1" >>"$OUT/summary.txt"; }  # kept as we go: a timeout keeps what ran
: >"$OUT/summary.txt"
nvidia-smi --query-gpu=index,name --format=csv,noheader
echo "NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-unset}"
make -j32 train >/tmp/mg/build.log 2>&1 || { tail -30 /tmp/mg/build.log; exit 1; }
python3 dev/make_shard.py /tmp/mg/train.bin 2000000 1000 pattern 1
python3 dev/make_shard.py /tmp/mg/val.bin 100000 1000 pattern 2
common="-e tiny -v 1000 -b 8 -t 128 -d 2048 -x 50 -l 2e-3 --warmup 5 --val-every 25 --val-batches 2 -s 0 -i /tmp/mg/train.bin -j /tmp/mg/val.bin"
./train $common -o /tmp/mg/one >/tmp/mg/one.log 2>&1
echo "1 GPU (accumulation 2): exit $?"
./train -g 2 $common -o /tmp/mg/two >/tmp/mg/two.log 2>&1
echo "2 GPUs: exit $?"
python3 - <<'PY' | tee /tmp/mg/compare.txt
import re
def losses(p):
    return [float(m.group(1)) for m in re.finditer(r"^step +\d+/\d+ \| loss ([0-9.]+)", open(p).read(), re.M)]
a, b = losses("/tmp/mg/one.log"), losses("/tmp/mg/two.log")
n = min(len(a), len(b))
worst = max((abs(x - y) for x, y in zip(a, b)), default=float("nan"))
print(f"1 vs 2 GPUs: {len(a)} and {len(b)} steps, largest |loss difference| {worst:.2e}, final {a[-1] if a else 'none'} vs {b[-1] if b else 'none'}")
PY
note "$(cat /tmp/mg/compare.txt)"
note "  1 GPU: $(grep 'val loss' /tmp/mg/one.log | tail -1) | 2 GPUs: $(grep 'val loss' /tmp/mg/two.log | tail -1)"
# resume on 2 GPUs: 20 steps with a checkpoint at 10, then 11-20 again from it
r="-g 2 $common -x 20 -n 10 --keep-checkpoints 3"
./train $r -o /tmp/mg/ra >/tmp/mg/ra.log 2>&1
mkdir -p /tmp/mg/rb && cp -r /tmp/mg/ra/step_00000010 /tmp/mg/rb/ && echo step_00000010 >/tmp/mg/rb/latest
./train $r -y 1 -o /tmp/mg/rb >/tmp/mg/rb.log 2>&1
full=$(grep -E '^step +(1[1-9]|20)/' /tmp/mg/ra.log | cut -d'|' -f1-2)
part=$(grep -E '^step +(1[1-9]|20)/' /tmp/mg/rb.log | cut -d'|' -f1-2)
if [ -n "$full" ] && [ "$full" = "$part" ]; then note "2-GPU resume: steps 11-20 identical";
else note "2-GPU resume: DIFFERENT ($(echo "$full" | wc -l) vs $(echo "$part" | wc -l) lines)"; fi
# a killed worker ends the run with an error naming it
./train -g 2 $common -x 100000 -o /tmp/mg/kill >/tmp/mg/kill.log 2>&1 &
launcher=$!
sleep 15
victim=$(pgrep -P $launcher | tail -1)
t0=$(date +%s)
kill -9 "$victim"
wait $launcher
rc=$?
note "killed worker pid $victim: launcher exit $rc after $(( $(date +%s) - t0 )) s: $(grep -m1 'error: rank' /tmp/mg/kill.log)"
# throughput, GPT-2 124M
if [ "${THROUGHPUT:-1}" = 1 ]; then
    for V in 50304 262144; do
        python3 dev/make_shard.py /tmp/mg/rand_$V.bin 40000000 $V random 3
        for g in 1 2; do
            log=/tmp/mg/tp_${V}_$g.log
            ./train -g $g -e d12 -v $V -b 16 -t 1024 -x 20 --warmup 5 --val-every 0 -s 0 -i /tmp/mg/rand_$V.bin -o /tmp/mg/tp >$log 2>&1
            med=$(grep '| loss' $log | tail -10 | awk -F'|' '{print $5}' | awk '{print $1}' | sort -n | sed -n 5p)
            tok=$(grep '| loss' $log | tail -10 | awk -F'|' '{print $6}' | awk '{print $1}' | sort -n | sed -n 5p)
            note "d12 V=$V B=16/GPU fused, $g GPU(s): median $med ms/step, $tok tok/s $(grep -m1 error $log)"
        done
    done
fi
tar -czf "$OUT/mg_logs.tar.gz" -C /tmp/mg $(cd /tmp/mg && ls *.log compare.txt)
echo
echo "==== summary ===="
printf '%s\n' "${summary[@]}"
