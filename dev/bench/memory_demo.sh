#!/usr/bin/env bash
# The largest micro-batch that fits on this GPU with each output layer: GPT-2 124M (d12), T=1024,
# V=262144 by default. Tries batch sizes from large to small; a size fits when two training steps
# run. The trainer refuses sizes its estimate says will not fit (one line, no allocation), so the
# misses are quick.
#   bash dev/bench/memory_demo.sh SHARD.bin [V] [batch sizes...]
#   LAYERS="fused canonical" bash dev/bench/memory_demo.sh ...   (default: fused canonical; "fused:MB" passes
#   --logits-mb MB, "fused:0" the streaming path)
set -uo pipefail
shard=$1
V=${2:-262144}
shift 2 || shift $#
sizes=${*:-256 224 192 160 128 112 96 80 64 48 32 16}
for layer in ${LAYERS:-fused canonical}; do
    found=""
    for B in $sizes; do
        rm -rf /tmp/memory_demo # a new run sets an earlier one aside whole
        extra=()
        [[ $layer == *:* ]] && extra=(--logits-mb "${layer#*:}")
        log=$(./train -e d12 -v "$V" -b "$B" -t 1024 -x 2 --warmup 1 --val-every 0 -s 0 --output "${layer%%:*}" "${extra[@]}" \
            -i "$shard" -o /tmp/memory_demo 2>&1)
        if [ $? -eq 0 ]; then
            mem=$(echo "$log" | grep '| loss' | tail -1 | sed -E 's/.*\| ([0-9.]+) GB$/\1/')
            found="$B"
            echo "memory_demo: $layer V=$V T=1024: largest micro-batch -b $B fits ($mem GB in use after step 2;" \
                "$(echo "$log" | grep -m1 '^output layer:'))"
            break
        fi
        echo "memory_demo: $layer -b $B: $(echo "$log" | grep -m1 error)"
    done
    [ -n "$found" ] || echo "memory_demo: $layer: none of $sizes fits"
done
