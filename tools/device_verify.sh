#!/usr/bin/env bash
# The lead's final device call: every GPU-marked test (in parallel: compiles dominate), the
# harness in local mode on the GPU, then the full bench. Logs and results come back in $OUT.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_mm_cache
LOG="$OUT/verify.log"
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  echo "== pytest -m gpu tests/ (xdist)"
  timeout "${TESTS_S:-170}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/ 2>&1 | tail -25
  echo "== python eval.py --mode test (harness, local mode, GPU)"
  timeout 40 python3 eval.py --mode test 2>&1 | tail -8
  echo "== bench"
  timeout "${BENCH_S:-110}" python3 -m mxfp4_mm.bench --reps 60 --out bench/results 2>&1 | tail -30
} > "$LOG" 2>&1
tar czf "$OUT/results.tgz" bench/results
tail -80 "$LOG"
