#!/bin/bash
# ng plans: GPU tests, a diagnosis, timing against the table, memcheck; then the two prepared A/Bs with what is left.
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a $LOG
python3 -c "import torch; print(torch.__version__)" >> $LOG
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
left() { echo $(( ${BUDGET:-540} - ($(date +%s) - T0) )); }
step 200 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_cuda_fp8.py
step 40 python3 .lab/ngdiag.py
step 100 python3 tools/cuda_lab.py plans --reps 40 --out $OUT/ng_plans.json --plans "256,3072,1536:f8,64,6,1,1,1,0,0,2 256,3072,1536:f8,64,4,1,1,1,0,0,2 64,7168,2048:f8,64,6,1,1,1,0,0,2 64,7168,2048:f8,64,4,1,1,1,0,0,2 64,7168,2048:f8,64,4,2,1,1,0,0,2 16,2112,7168:f8,16,4,7,1,1,0,0,2 16,2112,7168:f8,16,5,6,1,1,0,0,2"
L=$(left); L=$((L-10)); [ $L -gt 240 ] && L=240; [ $L -gt 30 ] && PYTORCH_NO_CUDA_MEMORY_CACHING=1 step $L /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_kernels.py --backends cuda --label-prefix f8 --shapes fp8
L=$(left); [ $L -gt 40 ] && step $((L/2)) python3 notes/results/2026-12-07/quant-threads-unrun/carveout_ab.py 30
L=$(left); [ $L -gt 30 ] && step $((L-5)) python3 notes/results/2026-12-07/quant-threads-unrun/qthreads.py 30 2 4
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$" $LOG | tail -c 10000
