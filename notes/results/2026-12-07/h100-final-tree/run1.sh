#!/bin/bash
# The suites and the bench with humming (humming_kernels wheel in .whl/); on an H200 the fp8 shapes tuned first.
cd "$(git rev-parse --show-toplevel)" || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee -a $LOG
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $LOG 2>&1
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
python3 -m pip install --no-deps -q .whl/humming_kernels-*.whl >> $LOG 2>&1 && python3 -c "import humming; print('humming ok')" >> $LOG 2>&1
case "$GPU" in *H200*)
  step 180 python3 -m mxfp4_mm.tune --shapes "16,2112,7168;8,2112,7168;64,7168,2048;256,3072,1536" --backends cuda --reps 30 --write --log $OUT/tune.json
  git diff -- mxfp4_mm/backends/cuda/plans.py > $OUT/tune.diff ;;
esac
step 160 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_contract.py tests/test_graph_capture.py tests/test_extremes_property.py
step 200 python3 -m mxfp4_mm.bench --reps 60 --backends cuda,triton --out $OUT/bench
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
