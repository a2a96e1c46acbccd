#!/usr/bin/env bash
# pack_corpus.sh - packs the cleaned default corpus texts in the cache (and, with --shards, the
# prepared tokenizers and shards) into one small .tar.xz for a machine without network (10 MB with
# the standard text; a V above 187536 needs the extended one: `./train prepare --default-corpus -v
# 262144` fetches it first, and the pack grows to about 18 MB).
#
#   dev/check/pack_corpus.sh [--shards] [--cache-dir DIR] [-o FILE]     (defaults: .cache, corpus.tar.xz)
#
# On the other machine, from the repository root:
#   mkdir -p .cache && tar -xJf corpus.tar.xz -C .cache
#   ./train -v 262144 ...      # finds .cache/corpus/extended-v1.txt: no fetch; prepares in seconds
# The cache is keyed by the corpus text and V, so shards packed with --shards are used as they are
# and any other V is prepared there from the text.
set -euo pipefail

cache=.cache
out=corpus.tar.xz
shards=0
while [ $# -gt 0 ]; do
    case "$1" in
        --shards) shards=1; shift ;;
        --cache-dir) cache="${2:?--cache-dir needs a folder}"; shift 2 ;;
        -o) out="${2:?-o needs a file name}"; shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "error: unknown argument $1 (see dev/check/pack_corpus.sh --help)" >&2; exit 2 ;;
    esac
done

cd "$cache" 2>/dev/null || { echo "error: no cache folder $cache (run \`make data\` first)" >&2; exit 1; }
texts=$(ls corpus/default-v*.txt corpus/extended-v*.txt corpus/synthetic-v*.txt 2>/dev/null || true)
[ -n "$texts" ] || { echo "error: no corpus text under $cache/corpus (run \`make data\` first)" >&2; exit 1; }
items=($texts)
if [ "$shards" = 1 ]; then
    for d in default-v*-v* extended-v*-v* synthetic-v*-v*; do
        [ -f "$d/tokenizer.bin" ] && [ -f "$d/train.bin" ] && [ -f "$d/val.bin" ] && items+=("$d")
    done
fi
case "$out" in /*) dest="$out" ;; *) dest="$OLDPWD/$out" ;; esac
echo "packing ${items[*]} from $cache into $out"
tar -cf - "${items[@]}" | xz -T0 -6 > "$dest"
size=$(stat -c %s "$dest")
limit=$((64 * 1024 * 1024))
echo "$out: $((size / 1024 / 1024)) MiB ($size bytes)"
if [ "$size" -gt "$limit" ]; then
    echo "error: $out is over 64 MiB; pack without --shards (the standard text is ~9 MiB, the extended ~18 MiB) and prepare there" >&2
    exit 1
fi
