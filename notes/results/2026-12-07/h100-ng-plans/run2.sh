#!/bin/bash
# tune the four fp8 shapes (NG=1: with the ng plans offered), suites, bench with humming, then memcheck with the rest.
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a $LOG
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
[ "${NG:-0}" = 1 ] && sed -i 's/^FP8_NG_CHECKED = False/FP8_NG_CHECKED = True/' mxfp4_mm/backends/cuda/__init__.py && grep -n "^FP8_NG_CHECKED" mxfp4_mm/backends/cuda/__init__.py >> $LOG
pip install --no-deps -q .whl/humming_kernels-*.whl >> $LOG 2>&1 && python3 -c "import humming; print('humming ok')" >> $LOG 2>&1
step 170 python3 -m mxfp4_mm.tune --shapes "16,2112,7168;8,2112,7168;64,7168,2048;256,3072,1536" --backends cuda --reps 30 --write --log $OUT/tune.json
git diff -- mxfp4_mm/backends/cuda/plans.py > $OUT/tune.diff
step 150 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_contract.py tests/test_graph_capture.py tests/test_extremes_property.py
step 200 python3 -m mxfp4_mm.bench --reps 60 --backends cuda,triton --out $OUT/bench
step 45 python3 notes/results/2026-12-07/quant-threads-unrun/qthreads.py 30 2 4
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$" $LOG | tail -c 8000
