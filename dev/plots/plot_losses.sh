#!/usr/bin/env bash
# Draws the training-loss curves of one or more run logs (log.jsonl) into one PNG with gnuplot.
#   bash dev/plots/plot_losses.sh OUT.png RUN_A/log.jsonl RUN_B/log.jsonl ...
# Each curve is named after its run directory. Needs gnuplot (Debian: gnuplot-nox).
set -euo pipefail
png=$1
shift
command -v gnuplot >/dev/null || { echo "plot_losses: gnuplot not installed (apt-get install gnuplot-nox); skipped"; exit 1; }
tmp=$(mktemp -d)
plot=""
for log in "$@"; do
    name=$(basename "$(dirname "$log")")
    grep '"type":"step"' "$log" | sed -E 's/.*"step":([0-9]+),"loss":([-0-9.eE+]+).*/\1 \2/' >"$tmp/$name.dat"
    plot+="${plot:+, }'$tmp/$name.dat' using 1:2 with lines title '$name'"
done
gnuplot <<GP
set terminal pngcairo size 1000,600
set output '$png'
set xlabel 'step'
set ylabel 'training loss'
set grid
plot $plot
GP
rm -rf "$tmp"
echo "plot_losses: wrote $png"
