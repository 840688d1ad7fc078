#!/bin/bash
# Long-K memcheck of the fp8 plans, timelines of the three large fp8 shapes, and B_BEFORE_A = 1 / 3 against 2.
cd "$(git rev-parse --show-toplevel)" || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee -a $LOG
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $LOG 2>&1
for n in 1 3; do sed "s/^constexpr int B_BEFORE_A = 2;/constexpr int B_BEFORE_A = $n;/" mxfp4_mm/backends/cuda/mxfp4_gemm_sm90_fp8.cu > /tmp/bba$n.cu; done
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
PYTORCH_NO_CUDA_MEMORY_CACHING=1 step 170 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_kernels.py --backends cuda --label-prefix f8 --shapes "17,160,7168;5,48,16384;3,96,4608"
for a in "256,3072,1536 f8,128,5" "64,7168,2048 f8,64,4,1,2" "16,2112,7168 f8,16,10,3,2"; do step 60 python3 tools/fp8_timeline.py $a --reps 30; done
step 170 python3 tools/cuda_lab.py ab /tmp/bba1.cu /tmp/bba3.cu --shapes "16,2112,7168 8,2112,7168 64,7168,2048 256,3072,1536" --reps 40 --out $OUT/bba.json
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
