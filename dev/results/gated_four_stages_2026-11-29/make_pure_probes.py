#!/usr/bin/env python3
"""The products alone (no epilogue): kernels/gated_mlp.cu of the tree with no staging tile, no drain
and the consumers keeping their accumulators, written to build/tmp/g4/gm_pure{3,4}{,x}.cu: 3 or 4
ring stages, the backward's copies inline up to C = 1536 (as the tree) or never (x). Link each with
a bench built to time whatever its checks say (bench_probe.cu: `if (check_only) return ...`)."""
import os
src = open('kernels/gated_mlp.cu').read()
os.makedirs('build/tmp/g4', exist_ok=True)


def make(name, stages, inline_max):
    s = src
    for old, new in [
            ('#define GM_STAGES 3\n', '#define GM_STAGES %d\n' % stages),
            ('#define GM_STAGING_BYTES (GM_BM * GM_BN * 2) /* a tile in bf16, rows of 512 bytes */',
             '#define GM_STAGING_BYTES 0 /* probe: no epilogue */'),
            ('#define GM_INLINE_MAX_C 1536 ', '#define GM_INLINE_MAX_C %d ' % inline_max),
            ('        for (uint32_t u = cluster; u < a.units; u += nclusters, j++) {\n            int64_t m0;',
             '        for (uint32_t u = cluster; u < 0; u += nclusters, j++) { /* probe: no drain */\n            int64_t m0;'),
            ('''            if (j > 0) gm_wait(drained_bar, (j - 1) & 1); /* the drain is done with the previous tile */
            gm_stage(acc, stg, wg, wq, lane);
            __syncwarp();
            if (lane == 0) mbar_arrive(staged_bar);''',
             '            if (acc[0] == 1234.5f && acc[127] == -3.0f) a.h[threadIdx.x] = bf16(); /* probe: keep the products */')]:
        assert s.count(old) == 1, old[:60]
        s = s.replace(old, new)
    open('build/tmp/g4/gm_%s.cu' % name, 'w').write(s)


make('pure3', 3, 1536); make('pure4', 4, 1536); make('pure3x', 3, 0); make('pure4x', 4, 0)
