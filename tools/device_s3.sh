#!/usr/bin/env bash
# Session 3's device call: the full verification (every GPU test, the harness on the GPU, the
# bench that writes bench/results), then the measurements for the notes: the cost of the
# WIDE_FALLBACK checks (A/B in one process), eager host overhead, and where wgmma plans spend
# their time (and a small shape with and without its cluster).
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_mm_cache
TESTS_S=200 BENCH_S=120 bash tools/device_verify.sh > /dev/null 2>&1
tail -45 "$OUT/verify.log" | grep -v "^SKIPPED" | cut -c1-300
echo "== experiment: WIDE_FALLBACK checks on (baseline) vs off"
timeout 120 python3 tools/experiment_cuda.py --option=-DWIDE_FALLBACK=0 --reps 60 > "$OUT/exp.log" 2>&1
tail -12 "$OUT/exp.log"
echo "== host overhead"
timeout 60 python3 tools/host_overhead.py --calls 500 --out "$OUT/host.json" 2>&1 | tail -8
echo "== timeline: wgmma plans vs their mma.sync twins"
timeout 90 python3 tools/timeline_cuda.py --plans "256,3072,1536:64,8,2,1,2,4,0,1 256,3072,1536:64,8,2,1,2,4,0,0 256,3072,1536:128,8,2,1,4,2,0,1 64,7168,2048:64,8,2,1,4,2,0,1 64,7168,2048:64,8,2,1,4,2,0,0 4,2880,512:8,3,1,4,1,4,0,0 4,2880,512:8,3,1,4,1,1,0,0" > "$OUT/timeline_wg.log" 2>&1
tail -16 "$OUT/timeline_wg.log"
