#!/bin/bash
# mma.sync kernel, K = 512 shapes: B copied at once for 16-row tiles (early), scale loads issued first (vs), scales by cp.async with A's group (cpa).
cd "$(git rev-parse --show-toplevel)" || exit 1  # early.cu, early_vs.cu, early_cpa.cu made from the diffs into .lab/
T0=$(date +%s); LOG=$OUT/log.txt; export OUT
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader | tee -a $LOG
step() { local t=$1; shift; echo "# $* (timeout $t, at $(( $(date +%s) - T0 )) s)" >> $LOG; timeout $t "$@" >> $LOG 2>&1; echo "rc=$? ($(( $(date +%s) - T0 )) s)" >> $LOG; }
# the cpa variant keeps a word per scale byte: room for it in every build of this run
sed -i 's|    s = -(-chw \* plan.nt \* 2 \* threads // 16) \* 16|    s = 4 * chw * plan.nt * 2 * threads|' mxfp4_mm/backends/cuda/plans.py
grep -n "    s = " mxfp4_mm/backends/cuda/plans.py >> $LOG
for r in 1 2; do
step 200 python3 tools/cuda_lab.py ab .lab/early.cu .lab/early_vs.cu .lab/early_cpa.cu --shapes "4,2880,512 32,4096,512 32,2880,512" --reps 60 --out $OUT/ab$r.json
done
echo "total $(( $(date +%s) - T0 )) s" >> $LOG
grep -v "^\.\+\|^$" $LOG | tail -c 6000
