#!/usr/bin/env bash
# One device call for the CUDA backend: GPU tests, bench, plan sweep (rewrites the table), bench again.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -m pytest -q -n 8 -m gpu tests/test_cuda_backend.py -x 2>&1 | tee "$OUT/pytest_cuda.log" | tail -25
python3 tools/bench_cuda.py --reps 200 2>&1 | tee "$OUT/bench_before.log"
if [ "${TUNE:-1}" = 1 ]; then
  python3 tools/tune_cuda.py --reps 60 --write --shapes "${TUNE_SHAPES:-all}" 2>&1 | tee "$OUT/tune.log" | grep -E "best|precompiled|failed|BAD"
  cp mxfp4_mm/tables/cuda_plans.py "$OUT/"
  python3 tools/bench_cuda.py --reps 200 2>&1 | tee "$OUT/bench_after.log"
fi
python3 tools/diag_cuda.py 2>&1 | tee "$OUT/diag.log"
