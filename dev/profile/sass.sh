#!/usr/bin/env bash
# sass.sh - the SASS of one of the tree's CUDA files as built (sm_90a), with ptxas's resource use:
#   bash dev/profile/sass.sh kernels/gated_mlp.cu [out.sass]
# then `python3 dev/profile/sass_controls.py out.sass gated_mlp_kernelILi1 --only LDG,STG,MUFU` for
# the scheduling controls. Needs cuobjdump: the CUDA toolkit's, or the pip wheel's
# (`pip download nvidia-cuda-cuobjdump --no-deps`, unzip, CUOBJDUMP=.../nvidia/cu13/bin/cuobjdump).
set -euo pipefail
src=${1:?usage: sass.sh FILE.cu [OUT.sass]}
out=${2:-/tmp/$(basename $src .cu).sass}
CUOBJDUMP=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[ -x "$CUOBJDUMP" ] || { echo "error: no cuobjdump (set CUOBJDUMP; see the header of $0)" >&2; exit 1; }
obj=/tmp/$(basename $src .cu).sass.o
nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -I. -Xptxas -v -c $src -o $obj 2>&1 |
  grep -E 'Compiling entry|registers|spill' | paste - - - | sed 's/ptxas info *: //g' | cut -c1-200
"$CUOBJDUMP" -sass $obj > $out
echo "SASS in $out ($(grep -c 'Function :' $out) functions)"
