#!/bin/bash
# The fp8 kernel with A quantized inside the GEMM's launch (gq.diff, gq_lab.py), then the chunk-loop
# variants of 2026-12-07 that no GPU had run (the pair loop, the batched split-K sum, the loop without
# conversion / MMAs, 1 or 3 B chunks before the grid dependency). Run from the repository root, $OUT set.
cd "$(git rev-parse --show-toplevel)" || exit 1
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee -a $LOG
python3 -c "import torch, triton; print(torch.__version__, triton.__version__)" >> $LOG 2>&1
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
K=mxfp4_mm/backends/cuda/mxfp4_gemm_sm90_fp8.cu; R=notes/results/2026-12-07; L=.lab/r; mkdir -p $L
patch -s -o $L/gq.cu $K notes/results/2026-12-08/fp8-grid-quant/gq.diff
# and with all of the ring's first stages of B copied before the barrier (it no longer waits for a grid)
sed "s/^constexpr int B_BEFORE_A = 2;/constexpr int B_BEFORE_A = STAGES;/" $L/gq.cu > $L/gq_all.cu
for v in noconv nomma noboth; do patch -s -o $L/$v.cu $K $R/h100-fp8-loop-ablation/$v.diff; done
for n in 1 3; do sed "s/^constexpr int B_BEFORE_A = 2;/constexpr int B_BEFORE_A = $n;/" $K > $L/bba$n.cu; done
patch -s -o $L/pairs.cu $K $R/fp8-pair-loop-unrun/pairs.diff
# the batched split-K sum changes a header: the kernel with that header inlined
patch -s -o $L/fold_batched.h mxfp4_mm/backends/cuda/mxfp4_fold_sm90.h $R/h100-ahead-batched/batched_split_sum.diff
python3 -c "import sys; k=open('$K').read(); h=open('$L/fold_batched.h').read().replace('#pragma once', ''); open('$L/batched.cu', 'w').write(k.replace('#include \"mxfp4_fold_sm90.h\"', h))"
G=notes/results/2026-12-08/fp8-grid-quant/gq_lab.py
S="16,2112,7168 8,2112,7168 64,7168,2048 256,3072,1536"
step 200 python3 $G $L/gq.cu,$L/gq_all.cu 40 $OUT/gq1.json
export PYTORCH_NO_CUDA_MEMORY_CACHING=1
step 150 /usr/local/cuda/bin/compute-sanitizer --tool memcheck --error-exitcode 1 python3 $G $L/gq.cu 1 --check-only
unset PYTORCH_NO_CUDA_MEMORY_CACHING
step 60 python3 tools/cuda_lab.py ab $L/pairs.cu $L/batched.cu --shapes "$S" --reps 40 --out $OUT/pairs1.json
step 60 python3 tools/cuda_lab.py ab $L/noconv.cu $L/nomma.cu $L/noboth.cu --shapes "$S" --reps 40 --out $OUT/ablate1.json
step 60 python3 $G $L/gq.cu,$L/gq_all.cu 40 $OUT/gq2.json
for w in "256,3072,1536 f8,128,5" "64,7168,2048 f8,64,4,1,2" "16,2112,7168 f8,16,10,3,2"; do
  step 40 python3 tools/fp8_timeline.py $w --reps 30
  step 40 python3 tools/fp8_timeline.py $w --reps 30 --source $L/gq.cu --gq
done
step 60 python3 tools/cuda_lab.py ab $L/bba1.cu $L/bba3.cu --shapes "$S" --reps 40 --out $OUT/bba1.json
step 60 python3 tools/cuda_lab.py ab $L/pairs.cu $L/batched.cu --shapes "$S" --reps 40 --out $OUT/pairs2.json
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$\|PytestBenchmarkWarning" $LOG | tail -c 9000
