#!/bin/bash
# Not run yet. The fp8 pair loop (pairs.diff) against the shipped loop: an A/B with the fixed `cuda_lab ab`,
# then the fp8 GPU tests and the fp8 memcheck with the pair loop in the package's kernel file (restored after).
cd "$(git rev-parse --show-toplevel)" || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee -a $LOG
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
K=mxfp4_mm/backends/cuda/mxfp4_gemm_sm90_fp8.cu
mkdir -p .lab && patch -s -o .lab/pairs.cu $K notes/results/2026-12-07/fp8-pair-loop-unrun/pairs.diff
S="16,2112,7168 8,2112,7168 64,7168,2048 256,3072,1536"
for r in 1 2; do step 120 python3 tools/cuda_lab.py ab .lab/pairs.cu --shapes "$S" --reps 40 --out $OUT/ab$r.json; done
cp $K .lab/shipped.cu && cp .lab/pairs.cu $K
step 200 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_cuda_fp8.py
PYTORCH_NO_CUDA_MEMORY_CACHING=1 step 200 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 tools/sanitize_kernels.py --backends cuda --label-prefix f8 --shapes fp8
cp .lab/shipped.cu $K
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$\|random     ok\|block ok" $LOG | tail -c 6000
