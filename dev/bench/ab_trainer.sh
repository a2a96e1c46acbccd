#!/usr/bin/env bash
# ab_trainer.sh - two trainer binaries, same GPU, same call: is a change faster in the trainer?
#   bash dev/bench/ab_trainer.sh               (from the repository root; output in $OUT, or ./out)
# A (default ./train, built here) against B (default inputs/train_base: the base commit's `train`
# built on the workstation, `git worktree add /tmp/base BASE && make -C /tmp/base train`, carried).
# GPT-2 124M (d12), T=1024, B=32 (AB_BATCH), random tokens; for each vocabulary in AB_VOCABS
# (default 50304) and output layer in AB_OUTPUTS (default fused), AB_ROUNDS rounds (default 3)
# alternating B and A, each the median ms of steps 11-30. The H100 holds its power limit by clock
# (+-3 % from run to run), so one round alone does not resolve a 1 % change; the summary gives every
# round and the median of the ratios A/B.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-out}
A=${A:-./train}
B=${B:-inputs/train_base}
ROUNDS=${AB_ROUNDS:-3}
mkdir -p "$OUT" /tmp/ab
[ -x "$B" ] || { echo "ab_trainer: no base binary at $B"; exit 1; }
[ "$A" = ./train ] && { make -j16 train >/tmp/ab/build.log 2>&1 || { tail -20 /tmp/ab/build.log; exit 1; }; }
: >"$OUT/ab_summary.txt"
step_ms() { # $1: binary, rest: flags; the median ms/step of steps 11-30
    local bin=$1; shift
    rm -rf /tmp/ab/run
    "$bin" "$@" -o /tmp/ab/run >/tmp/ab/last.log 2>&1 || { echo "FAILED"; tail -3 /tmp/ab/last.log >&2; return; }
    grep '| loss' /tmp/ab/last.log | tail -20 | awk -F'|' '{print $5}' | awk '{print $1}' | sort -n | sed -n 10p
}
for V in ${AB_VOCABS:-50304}; do
    python3 tests/fixtures/gen/make_shard.py /tmp/ab/rand_$V.bin 20000000 $V random 3 >/dev/null
    for output in ${AB_OUTPUTS:-fused}; do
        args="-e d12 -v $V -b ${AB_BATCH:-32} -t 1024 -x 30 --warmup 10 --val-every 0 -s 0 --output $output -i /tmp/ab/rand_$V.bin"
        a_all="" b_all="" ratios=""
        for r in $(seq "$ROUNDS"); do
            b=$(step_ms "$B" $args)
            a=$(step_ms "$A" $args)
            a_all+=" $a" b_all+=" $b"
            ratios+=" $(python3 -c "print(f'{$a/$b:.4f}')" 2>/dev/null || echo nan)"
        done
        med=$(printf '%s\n' $ratios | sort -n | sed -n "$(((ROUNDS + 1) / 2))p")
        echo "V=$V $output B=${AB_BATCH:-32}: A ms/step$a_all | B$b_all | A/B$ratios (median $med)" | tee -a "$OUT/ab_summary.txt"
    done
done
