#!/usr/bin/env bash
# One device call for the Triton backend: GPU tests, a plan-tuning step, the bench.
# Few files come back from $OUT: logs are concatenated, results go in one tarball.
set -u
LOG="$OUT/device_triton.log"
{
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
  python3 -c "import torch, triton, matplotlib; print(torch.__version__, triton.__version__, matplotlib.__version__)"
  echo "== pytest -m gpu tests/test_triton_backend.py"
  python3 -m pytest -q -m gpu tests/test_triton_backend.py 2>&1 | tail -15
  echo "== tune"
  python3 tools/tune_triton.py --shapes all --budget-s "${TUNE_BUDGET_S:-90}" --log tune.json 2>&1
  echo "== pytest -m gpu tests/test_contract.py (triton, cuda)"
  python3 -m pytest -q -m gpu tests/test_contract.py -k "gpu-triton or gpu-cuda" 2>&1 | tail -5
  echo "== bench"
  python3 -m mxfp4_mm.bench --out bench/results 2>&1 \
    || { echo "== bench with every backend failed; again without cuda"; \
         python3 -m mxfp4_mm.bench --backends triton,torch --out bench/results 2>&1; }
} > "$LOG" 2>&1
tar czf "$OUT/results.tgz" bench/results tune.json mxfp4_mm/tables/triton_plans.py
tail -45 "$LOG"
