#!/bin/bash
# Not run yet. What bounds the fp8 chunk loop (noconv / nomma / noboth), and 1 or 3 B chunks before the grid dependency.
# The lab sources go to .lab/ first (from the repository root):
#   D=notes/results/2026-12-07/h100-fp8-loop-ablation; mkdir -p .lab
#   for v in noconv nomma noboth; do patch -s -o .lab/$v.cu mxfp4_mm/backends/cuda/mxfp4_gemm_sm90_fp8.cu $D/$v.diff; done
#   for n in 1 3; do sed "s/^constexpr int B_BEFORE_A = 2;/constexpr int B_BEFORE_A = $n;/" mxfp4_mm/backends/cuda/mxfp4_gemm_sm90_fp8.cu > .lab/bba$n.cu; done
cd "$(git rev-parse --show-toplevel)" || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee -a $LOG
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
S="16,2112,7168 8,2112,7168 64,7168,2048 256,3072,1536"
for r in 1 2; do
step 120 python3 tools/cuda_lab.py ab .lab/noconv.cu .lab/nomma.cu .lab/noboth.cu --shapes "$S" --reps 40 --out $OUT/ablate$r.json
step 120 python3 tools/cuda_lab.py ab .lab/bba1.cu .lab/bba3.cu --shapes "$S" --reps 40 --out $OUT/bba$r.json
done
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$" $LOG | tail -c 6000
