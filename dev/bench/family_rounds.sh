# family_rounds.sh - sourced by one-GPU A/B scripts: a family's trainer run against the parent's
# binary, as dev/check/families_peers.sh times ours. Defines
#   CK               where the end-of-run checkpoint goes (memory: it is not what is measured)
#   shard NAME V     /tmp/f/NAME.bin, 6M random tokens below V, made once
#   trainer R WHO PRESET SHARD
#                    round R of ./train (WHO new) or inputs/train_WHO (parent, a variant): B 16, T 2048,
#                    bf16 AdamW state, 14 steps; the median tokens/s of the last 8, GPU memory, step
#                    14's loss and the step's parts go to $S (log $OUT/WHO_PRESET_rR.log)
#   first_step WHO PRESET SHARD WHAT ARGS...
#                    seconds from the start of ./train (WHO new) or inputs/train_WHO, B 16, T 2048, bf16
#                    AdamW state, to its first step's line (step 1, or step 5 of a resume), printed as
#                    "WHO PRESET WHAT: first step after X s"
# The caller sets OUT, S and t0 (its start, in $SECONDS) and makes /tmp/f.
CK=/dev/shm/fp
shard() { [ -f /tmp/f/$1.bin ] || python3 tests/fixtures/gen/make_shard.py /tmp/f/$1.bin 6000000 $2 random 3 >/dev/null; }
trainer() { # round who preset shard
  local bin=./train; [ $2 = new ] || bin=inputs/train_$2
  local log=$OUT/${2}_$3_r$1.log; rm -rf $CK
  timeout 150 $bin -e $3 -b 16 -t 2048 --max-seq-len 2048 -x 14 --warmup 2 --val-every 0 -s 0 --step-parts 1 \
    --optimizer-state bf16 -i /tmp/f/$4.bin -o $CK >$log 2>&1
  echo "r$1 $2 $3: median $(grep '| loss' $log | tail -8 | grep -o '[0-9]* tok/s' | sort -n | sed -n 4p), $(grep '| loss' $log | tail -1 | grep -o '[0-9.]* GB'), step 14 $(grep -E '^step +14/' $log | cut -d'|' -f2) $(grep '| loss' $log | tail -1 | grep -o 'fwd.*' | cut -c1-50) $(grep -m1 error $log) [$((SECONDS - t0)) s]" | tee -a $S
}
first_step() { # who preset shard what args...
  local who=$1 preset=$2 data=$3 what=$4; shift 4
  local bin=./train; [ $who = new ] || bin=inputs/train_$who
  python3 - "$who $preset $what" $bin -e $preset -b 16 -t 2048 --max-seq-len 2048 --warmup 2 --val-every 0 -s 0 \
    --optimizer-state bf16 -i /tmp/f/$data.bin "$@" <<'PY'
import subprocess, sys, time
t0 = time.time()
p = subprocess.Popen(sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
first, seen = None, []
for line in p.stdout:
    seen.append(line)
    if line.startswith('step     5/') or line.startswith('step     1/'):
        first = time.time() - t0
        p.kill()  # the start is what is timed
        break
p.wait()
print('%s: first step after %.1f s%s' % (sys.argv[1], first or -1, '' if first else ' | ' + ''.join(seen[-3:]).strip()))
PY
}
