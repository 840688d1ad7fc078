#!/usr/bin/env bash
# First device call for kernel v7 (wgmma plans, sm_90a; written without a GPU in session 2):
# the wgmma tests first (stop there if they fail: notes/cuda.md "v7" lists the layout assumptions
# to check), then a wide sweep with wgmma variants for the three large shapes, the table rewrite,
# every GPU test on it, and new vs old table in one process.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
cp mxfp4_mm/tables/cuda_plans.py "$OUT/old_cuda_plans.py"
timeout 120 python3 -m pytest -q -n 8 -m gpu -p no:cacheprovider tests/test_cuda_backend.py -k wgmma \
  > "$OUT/pytest_wgmma.log" 2>&1
rc=$?; tail -3 "$OUT/pytest_wgmma.log"; grep -E "^FAILED|Error" "$OUT/pytest_wgmma.log" | head -20
if [ $rc != 0 ]; then
  echo "wgmma tests failed (rc=$rc): layout probe, then stop"
  timeout 150 python3 tools/probe_wgmma.py 2>&1 | tee "$OUT/probe.log" | cut -c1-600
  timeout 100 python3 tools/probe_wgmma.py --plan 32,4,1,1,1,1,0,1 2>&1 | tee "$OUT/probe32.log" | cut -c1-600
  exit 1
fi
timeout "${SWEEP_S:-240}" python3 tools/tune_cuda.py --wide --wgmma --wide-bases 40 \
  --only "16,2112,7168 64,7168,2048 256,3072,1536" --reps 40 --results "$OUT/tune.jsonl" > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; grep -E "precompiled|best" "$OUT/tune.log"
python3 tools/tune_cuda.py --write-from "$OUT/tune.jsonl" && cp mxfp4_mm/tables/cuda_plans.py "$OUT/new_cuda_plans.py"
timeout 170 python3 -m pytest -q -n 8 -m gpu -p no:cacheprovider tests/ > "$OUT/pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/pytest.log"; grep -E "^FAILED|^ERROR" "$OUT/pytest.log" | head -20
timeout 40 python3 tools/bench_cuda.py --reps 100 --against "$OUT/old_cuda_plans.py" 2>&1 | tee "$OUT/bench.log"
