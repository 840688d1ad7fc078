#!/usr/bin/env bash
# One short device call for kernel v5 (cn: N tiles sharing A through the cluster; ring: B chunk
# ring): sweep v4 + v5 plans for the 6 benchmark shapes (one process; v4-only retry for shapes a
# crash left out), rewrite the table, run the CUDA GPU tests on it (task shapes, plans, fresh data,
# golden first; then the odd shapes), then time the new table against the old one in one process.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
cp mxfp4_mm/tables/cuda_plans.py "$OUT/old_cuda_plans.py"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
SHAPES="4,2880,512 16,2112,7168 32,4096,512 32,2880,512 64,7168,2048 256,3072,1536"
timeout 85 python3 tools/tune_cuda.py --shapes bench --reps 40 --results "$OUT/tune.jsonl" > "$OUT/tune.log" 2>&1
echo "tune rc=$?"; grep -E "precompiled|best" "$OUT/tune.log"
for s in $SHAPES; do  # shapes a crash left out: v4 plans only
  grep -q "\"shape\": \[${s//,/, }\]" "$OUT/tune.jsonl" 2>/dev/null && continue
  echo "retry $s without v5"
  timeout 25 python3 tools/tune_cuda.py --only "$s" --no-v5 --reps 40 --results "$OUT/tune.jsonl" >> "$OUT/tune_retry.log" 2>&1
done
python3 tools/tune_cuda.py --write-from "$OUT/tune.jsonl" && cp mxfp4_mm/tables/cuda_plans.py "$OUT/new_cuda_plans.py"
timeout 50 python3 -m pytest -q -n 8 -m gpu tests/test_cuda_backend.py -k "task_shapes or golden or plans or fresh" 2>&1 \
  | tee "$OUT/pytest_main.log" | grep -E "passed|failed|FAILED|Error" | tail -12
timeout 30 python3 tools/bench_cuda.py --reps 100 --against "$OUT/old_cuda_plans.py" 2>&1 | tee "$OUT/bench.log"
if [ "${ODD:-1}" = 1 ]; then  # odd shapes run general_plan (v4 plans): only needed after kernel changes
  timeout 45 python3 -m pytest -q -n 8 -m gpu tests/test_cuda_backend.py -k "odd_shapes" 2>&1 \
    | tee "$OUT/pytest_odd.log" | grep -E "passed|failed|FAILED|Error" | tail -6
fi
