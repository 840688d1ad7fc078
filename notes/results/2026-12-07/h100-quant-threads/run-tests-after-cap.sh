#!/bin/bash
# 512-thread cap of the quantization CTA: fp8 GPU tests, memcheck on long-K shapes (2 and 4 words a thread), one more A/B.
cd "$(dirname "$0")/.." || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a $LOG
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
python3 -c "from mxfp4_mm.backends.cuda import plans as P; print('quant threads', [P.fp8_quant_threads(k) for k in (1536, 2048, 7168, 16384)])" >> $LOG
step 170 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_cuda_fp8.py
PYTORCH_NO_CUDA_MEMORY_CACHING=1 step 60 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_kernels.py --backends cuda --label-prefix f8 --shapes "17,160,7168;5,48,16384;3,96,4608"
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$\|random     ok\|block ok" $LOG | tail -c 6000
