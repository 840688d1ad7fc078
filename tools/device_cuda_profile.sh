#!/usr/bin/env bash
# Device call: all CUDA-backend GPU tests, then Nsight Compute stall breakdowns for two shapes.
set -u
export PYTHONUNBUFFERED=1 MXFP4_MM_CACHE_DIR=/tmp/mxfp4_cache
python3 -m pytest -q -n 8 -m gpu tests/test_cuda_backend.py 2>&1 | grep -E "passed|failed|Error" | tail -5
for shape in ${NCU_SHAPES:-1 5}; do
  timeout 90 ncu --clock-control none -k mxfp4_gemm -c 1 --section SpeedOfLight --section WarpStateStats \
    --section MemoryWorkloadAnalysis --print-details all python3 tools/diag_cuda.py --ncu-shape "$shape" \
    > "$OUT/ncu_$shape.txt" 2>&1
  echo "== shape $shape"
  grep -E "Duration|SM Active Cycles|Elapsed Cycles|Stall|stall|Warp Cycles Per Issued|DRAM Throughput" "$OUT/ncu_$shape.txt" | head -30
done
