#!/usr/bin/env bash
# dev/dgelu_variants.sh - where kernels/matmul_dgelu.cu's time goes: the benchmark's fcproj rows
# (bench_kernels matmul section) for build variants of the kernel, then Nsight Compute's warp
# states for the default one.
#   bash dev/dgelu_variants.sh        (on the device; output in $OUT, or ./out)
# Variants: "name|nvcc flags" in DGELU_VARIANTS (default: the kernel; its product stored without
# pre_gelu or dGELU; pre_gelu loaded 1 and 6 k steps before a tile's end).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-out}
mkdir -p "$OUT" build/variants
make -j16 build/bench_kernels >"$OUT/dgelu_build.log" 2>&1 || { tail -20 "$OUT/dgelu_build.log"; exit 1; }
NV="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
OBJS=$(ls build/kernels/*.cu.o | grep -v matmul_dgelu)
IFS=';' read -ra VARIANTS <<<"${DGELU_VARIANTS:-default|;product only|-DMD_EPI_VARIANT=1;ahead 1|-DMD_AUX_AHEAD=1;ahead 6|-DMD_AUX_AHEAD=6}"
for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name flags <<<"$v"
    tag=${name// /_}
    $NV $flags -c kernels/matmul_dgelu.cu -o build/variants/md_$tag.o &&
        $NV build/dev/bench_kernels.cu.o $OBJS build/variants/md_$tag.o -lcublasLt -lcublas -lnccl -lcudart \
            -o build/variants/bench_md_$tag || { echo "build failed: $name"; continue; }
done
for round in 1 2; do
    for v in "${VARIANTS[@]}"; do
        IFS='|' read -r name flags <<<"$v"
        tag=${name// /_}
        ./build/variants/bench_md_$tag 32 matmul 2>&1 | grep "fcproj dinp" | sed "s/^/round $round, $name: /"
    done
done | tee "$OUT/dgelu_variants.txt"
timeout -k 10 120 ncu --kernel-name regex:dgelu_matmul --launch-count 1 --section SpeedOfLight --section WarpStateStats \
    --section Occupancy ./build/bench_kernels 32 matmul >"$OUT/dgelu_ncu.txt" 2>&1
grep -E "Duration|Throughput|Stall|Warp Cycles|Registers|Achieved|Issued" "$OUT/dgelu_ncu.txt" | head -40
