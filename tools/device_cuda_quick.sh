#!/usr/bin/env bash
# Short device call for the CUDA backend: task-shape + golden + plan tests, bench, one ncu profile.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
python3 -m pytest -q -n 8 -m gpu tests/test_cuda_backend.py -k "task_shapes or golden or plans or fresh" 2>&1 \
  | grep -E "passed|failed|Error" | tail -5
python3 tools/bench_cuda.py --reps 100 2>&1 | tee "$OUT/bench.log"
timeout 60 ncu --clock-control none -k mxfp4_gemm -c 1 --section SpeedOfLight --section WarpStateStats \
  --section Occupancy --section LaunchStats python3 tools/diag_cuda.py --ncu-shape "${NCU_SHAPE:-1}" \
  > "$OUT/ncu.txt" 2>&1
grep -E "Duration|Elapsed Cycles|Throughput|Stall|Warp Cycles|Achieved Occupancy|Registers|Block Limit|Waves" "$OUT/ncu.txt" | head -40
