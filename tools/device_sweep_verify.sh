#!/usr/bin/env bash
# One device call: re-sweep the CUDA plans of the 6 benchmark shapes, rewrite the table, run every
# GPU-marked test on it (xdist) and the harness in local mode, time new vs old table, then the
# stage ablation (tools/ablate_cuda.py). Everything that matters comes back in $OUT.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
cp mxfp4_mm/tables/cuda_plans.py "$OUT/old_cuda_plans.py"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "${SWEEP:-1}" = 1 ]; then
  timeout "${SWEEP_S:-110}" python3 tools/tune_cuda.py --shapes "${SWEEP_SHAPES:-bench}" --reps 40 \
    --results "$OUT/tune.jsonl" > "$OUT/tune.log" 2>&1
  echo "tune rc=$?"; grep -E "precompiled|best" "$OUT/tune.log"
  python3 tools/tune_cuda.py --write-from "$OUT/tune.jsonl" && cp mxfp4_mm/tables/cuda_plans.py "$OUT/new_cuda_plans.py"
fi
echo "== pytest -m gpu tests/ (xdist)"
timeout "${TESTS_S:-170}" python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/ > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -4 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -20
echo "== eval.py --mode test"
timeout 40 python3 eval.py --mode test 2>&1 | tail -4
echo "== new vs old table"
timeout 40 python3 tools/bench_cuda.py --reps 100 --against "$OUT/old_cuda_plans.py" 2>&1 | tee "$OUT/bench.log"
if [ "${ABLATE:-1}" = 1 ]; then
  echo "== ablation"
  timeout 150 python3 tools/ablate_cuda.py --reps 60 --out "$OUT/ablate.json" 2>&1 | tee "$OUT/ablate.log"
fi
