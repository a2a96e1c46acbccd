#!/bin/bash
# probe 5 (the mainloop alone), build/tmp/gg_probe5 built beside the tree with -DGG_PROBE=5
for r in 1 2; do echo "== $r"; ./build/tmp/gg_probe5 2>&1 | grep -E '^\| 32768'; done
