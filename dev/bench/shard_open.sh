#!/usr/bin/env bash
# How long a run takes to open its training data, and the host memory it holds: a shard of
# TOKENS (default 300 million) 2-byte tokens, one CPU step of a tiny model on it (the step itself
# takes milliseconds), wall time and peak resident memory by /usr/bin/time. BASE=<another ./train>
# times that binary in the same call, alternating.
# Usage: dev/bench/shard_open.sh [TOKENS]
set -euo pipefail
TOKENS=${1:-300000000}
OUT=${TMPDIR:-/tmp}/shard_open
mkdir -p "$OUT"
python3 - "$OUT/big.bin" "$TOKENS" <<'PY'
import array, struct, sys
path, n = sys.argv[1], int(sys.argv[2])
header = bytearray(64)
header[0:8] = b"FGPTTOK1"
struct.pack_into("<IIIIQQ", header, 8, 2, 2, 300, 0, n, 0)  # version, bytes a token, vocabulary, 0, count, no tokenizer
block = array.array("H", [i % 300 for i in range(1 << 20)]).tobytes()
with open(path, "wb") as f:
    f.write(header)
    for at in range(0, n, 1 << 20):
        f.write(block[: 2 * min(1 << 20, n - at)])
PY
for round in 1 2; do
    for bin in ./train ${BASE:-}; do
        rm -rf "$OUT/run"
        /usr/bin/time -f "$bin: %e s, peak resident %M KB" "$bin" --device cpu -e tiny -v 300 -b 4 -t 64 -x 1 \
            --val-every 0 -s 0 -i "$OUT/big.bin" -o "$OUT/run" 2>&1 | tail -1
    done
done
