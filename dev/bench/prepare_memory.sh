#!/usr/bin/env bash
# Host memory and time of `./train prepare` on a text of MB megabytes (default 200; documents of
# about 2 KB, in 8 files), the text whole against --shard-tokens N (default 10 million), with the
# tokenizer TOK (default: the Llama 3-style fixture). Peak resident memory and wall time by
# /usr/bin/time; the two sets' ids are compared last (they must be the same).
# Usage: dev/bench/prepare_memory.sh [MB] [N] [TOK]
set -euo pipefail
MB=${1:-200}
N=${2:-10000000}
TOK=${3:-tests/fixtures/hf_llama3_bos.json}
OUT=${TMPDIR:-/tmp}/prepare_memory
rm -rf "$OUT" && mkdir -p "$OUT/text"
python3 - "$OUT/text" "$MB" <<'PY'
import random, sys
out, mb = sys.argv[1], int(sys.argv[2])
random.seed(1)
words = ("the of and a to in is you that it he was for on are as with his they at be this have from or one had "
         "by word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write go "
         "see number no way could people my than first water been call who oil its now find long down day did get "
         "come made may part").split()
per_file = mb * 1000000 // 8
for k in range(8):
    with open(f"{out}/part{k}.txt", "w") as f:
        size = 0
        while size < per_file:
            doc = "\n".join(" ".join(random.choices(words, k=random.randint(4, 16))).capitalize() + "."
                            for _ in range(random.randint(10, 40)))
            f.write(doc + "<|end_of_text|>")
            size += len(doc) + 15
PY
measure() { /usr/bin/time -f "%e s, peak resident %M KB" "$@" 2>&1 | grep -E "peak resident|prepare: [0-9]" | tr '\n' ' '; echo; }
echo "text: $(du -sm "$OUT/text" | cut -f1) MB in 8 files; tokenizer $TOK"
echo "whole:    $(measure ./train prepare --tokenizer "$TOK" -o "$OUT/whole" "$OUT"/text/*.txt)"
echo "streamed: $(measure ./train prepare --tokenizer "$TOK" --shard-tokens "$N" -o "$OUT/streamed" "$OUT"/text/*.txt)"
python3 - "$OUT" <<'PY'
import glob, struct, sys
import numpy as np
def ids(path):
    b = open(path, "rb").read()
    n, = struct.unpack_from("<Q", b, 24)
    width, = struct.unpack_from("<I", b, 12)
    return np.frombuffer(b, dtype=np.uint16 if width == 2 else np.uint32, count=n, offset=64)
out = sys.argv[1]
for kind in ("train", "val"):
    whole = ids(f"{out}/whole/{kind}.bin")
    parts = sorted(glob.glob(f"{out}/streamed/{kind}_*.bin"))
    joined = np.concatenate([ids(p) for p in parts])
    print(f"{kind}: {len(whole)} tokens whole, {len(joined)} in {len(parts)} shard(s):",
          "the same ids" if np.array_equal(whole, joined) else "DIFFERENT IDS")
PY
