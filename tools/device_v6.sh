#!/usr/bin/env bash
# One device call for kernel v6 (B_LATE rule): wide plan sweep of the three large benchmark shapes,
# table rewrite, the CUDA GPU tests on it (incl. odd shapes: the rule changes general plans too),
# then new vs old table in one process.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
cp mxfp4_mm/tables/cuda_plans.py "$OUT/old_cuda_plans.py"
timeout "${SWEEP_S:-240}" python3 tools/tune_cuda.py --wide --only "16,2112,7168 64,7168,2048 256,3072,1536" \
  --reps 40 --results "$OUT/tune.jsonl" > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; grep -E "precompiled|best" "$OUT/tune.log"
python3 tools/tune_cuda.py --write-from "$OUT/tune.jsonl" && cp mxfp4_mm/tables/cuda_plans.py "$OUT/new_cuda_plans.py"
timeout 150 python3 -m pytest -q -n 8 -m gpu -p no:cacheprovider tests/test_cuda_backend.py tests/test_contract.py \
  > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -3 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head
timeout 40 python3 tools/bench_cuda.py --reps 100 --against "$OUT/old_cuda_plans.py" 2>&1 | tee "$OUT/bench.log"
