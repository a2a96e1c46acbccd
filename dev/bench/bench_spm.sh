#!/usr/bin/env bash
# SentencePiece-style tokenizers: load time and encode speed (build/bench_spm) on
#   - a tokenizer.json of Gemma 3's layout and size (262144 ids, ~33 MB), made up by the fixture
#     generator (tests/fixtures/gen/make_sentencepiece_fixtures.py --big), and
#   - a 32000-token one of the same layout trained by `tokenizers` on the text itself, for speed on
#     ordinary text.
# Needs `pip install tokenizers`. Usage: dev/bench/bench_spm.sh [TEXT] [MB]
# (default: the default corpus that `make data` prepares, first 3 MB).
set -euo pipefail
TEXT=${1:-.cache/corpus/default-v1.txt}
MB=${2:-3}
OUT=${TMPDIR:-/tmp}/bench_spm
mkdir -p "$OUT"
make -s build/bench_spm
python3 tests/fixtures/gen/make_sentencepiece_fixtures.py --big "$OUT/gemma3_262144.json"
python3 - "$TEXT" "$MB" "$OUT/gemma3_32000.json" <<'PY'
import json, sys
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
text, mb, path = sys.argv[1], float(sys.argv[2]), sys.argv[3]
with open(text, encoding="utf-8", errors="replace") as f:
    sample = f.read(int(mb * 4e6))
byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
tok = Tokenizer(models.BPE(byte_fallback=True))
tok.normalizer = normalizers.Replace(" ", "▁")
tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never", split=True)  # pieces as SentencePiece learns them
trainer = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<pad>", "<eos>", "<bos>", "<unk>"] + byte_tokens,
                              show_progress=False, limit_alphabet=1000)
tok.train_from_iterator(sample.split("\n"), trainer)
tok.pre_tokenizer = None  # Gemma 3's layout: no pre-tokenizer at encode time
tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
tok.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 2)])
j = json.loads(tok.to_str())
j["added_tokens"] = [a for a in j["added_tokens"] if a["content"] not in byte_tokens]
with open(path, "w", encoding="utf-8") as f:
    json.dump(j, f, ensure_ascii=False)
print(f"{path}: trained on {len(sample) / 1e6:.1f} MB")
PY
echo "== Gemma 3 layout and size (made up)"
./build/bench_spm "$OUT/gemma3_262144.json" "$TEXT" "$MB"
echo "== Gemma 3 layout, 32000 tokens trained on the text"
./build/bench_spm "$OUT/gemma3_32000.json" "$TEXT" "$MB"
