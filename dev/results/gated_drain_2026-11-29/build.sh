#!/usr/bin/env bash
# Builds build/tmp/gd/bench_<variant> (and two trainers) for run1.sh, run2.sh and the bench-only
# calls in summary.txt: dev/bench/gemm_gated_sm90.cu linked with the tree's other kernel objects and
# one gated_mlp.cu, the parent commit's with one of this folder's patches applied (none: parent).
# Run from the repository root after `make all` on the parent commit (PARENT, default HEAD).
set -euo pipefail
R=dev/results/gated_drain_2026-11-29; D=build/tmp/gd; mkdir -p $D
K=$(ls build/kernels/*.cu.o | grep -v gated_mlp)
NV="nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I."
LIBS="-lcublasLt -lcublas -lnccl -lcudart"
git show ${PARENT:-HEAD}:kernels/gated_mlp.cu > $D/gm_parent.cu
sed 's/if (check_only || failed) return failed ? 1 : 0;/if (check_only) return failed ? 1 : 0;/' \
  dev/bench/gemm_gated_sm90.cu > $D/bench_probe.cu            # probes: timed whatever their values
$NV -c $D/bench_probe.cu -o $D/bench_probe.o
variant() { # name patch sed-expression defines
  [ $1 = parent ] || cp $D/gm_parent.cu $D/gm_$1.cu
  [ -n "$2" ] && patch -s $D/gm_$1.cu < $R/$2
  [ -n "$3" ] && sed -i "$3" $D/gm_$1.cu
  $NV $4 -c $D/gm_$1.cu -o $D/gm_$1.o
  local bench=build/dev/bench/gemm_gated_sm90.cu.o; case $1 in no*) bench=$D/bench_probe.o;; esac
  nvcc -gencode arch=compute_90a,code=sm_90a -o $D/bench_$1 $bench $K $D/gm_$1.o $LIBS
}
INL0='s/#define GM_INLINE_MAX_C 1536/#define GM_INLINE_MAX_C 0/'
INLALL='s/#define GM_INLINE_MAX_C 1536/#define GM_INLINE_MAX_C 8192/'
variant parent "" "" ""
# run1.sh: the ring of registers ("new"), its copy issuers, its rasters
variant new ring_of_registers.patch "" ""
variant noinline ring_of_registers.patch "$INL0" ""
variant inlineall ring_of_registers.patch "$INLALL" ""
variant group4 ring_of_registers.patch 's/#define GM_GROUP 8$/#define GM_GROUP 4/' ""
variant group16 ring_of_registers.patch 's/#define GM_GROUP 8$/#define GM_GROUP 16/' ""
# run2.sh: L2 prefetch, GM_PF 1 (a tile's own, before it is staged) or 2 (the next tile's)
variant pf1 l2_prefetch.patch "" -DGM_PF=1
variant pf2 l2_prefetch.patch "" -DGM_PF=2
variant pf1inl l2_prefetch.patch "$INLALL" -DGM_PF=1
variant pf2inl l2_prefetch.patch "$INLALL" -DGM_PF=2
# bench-only calls: branch-free batches, batched staging reads, the removal probes
variant bf branch_free_batches.patch "" ""
variant bf4 branch_free_batches.patch 's/#define GM_LOADS 8 /#define GM_LOADS 4 /' ""
variant bfx branch_free_batches_loads_first.patch "" ""
variant lds batched_staging_reads.patch "" ""
variant ldsinl batched_staging_reads.patch "$INLALL" ""
variant noboth probe_no_loads_no_stores.patch "" ""
variant noload probe_no_loads.patch "" ""
variant nostore probe_no_stores.patch "" ""
variant noproducts probe_no_products.patch "" ""
# bk32 touches kernels/tma.cuh and wgmma.cuh too: `git apply` k_blocks_of_32_six_stages.patch to the tree,
# `make build/bench_gemm_gated_sm90`, copy it to $D/bench_bk32, `git checkout kernels/`
# cs, csf: summary.txt, call 9 (__ldcs/__stcs in place of the drain's loads and stores)
variant noproducts_noboth probe_no_products_no_loads_no_stores.patch "" ""
# run2.sh's trainers: ./train's link with a variant's object
link=$(make -n -B train | grep -- '-o train ')
for v in pf1 pf2inl; do eval "$(echo "$link" | sed "s| -o train | -o $D/train_$v |; s|build/kernels/gated_mlp.cu.o|$D/gm_$v.o|")"; done
