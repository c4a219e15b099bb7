#!/usr/bin/env bash
# GPU check for the executor (one CUDA machine, < 8 minutes): GPU tests, kernel benchmarks, and
# `execute` replays of DeepSeek-V3 and V4.1-Flash per-rank shapes (DEP2 prefill; DEP8/32/72
# decode; 1 dense + 2 MoE layers each) on every GPU of the machine (--ranks N, N = device count:
# with N >= 2 the plan's per-rank all-to-all bytes move between real GPUs and are measured, not
# priced by the simulator), then a disaggregated serving run of tiny-disagg (prefill replicas and
# the decode instance on separate GPUs, KV over NCCL send/recv) when N >= 3. Everything goes under
# one folder. Without CUDA: a dry run that prints each command and exits 0.
# usage: executor/gpu_check.sh [OUT_DIR]      (PYTHON=... to pick the interpreter)
set -u
cd "$(dirname "$0")/.."
OUT=${1:-gpu-check-$(date +%Y%m%d-%H%M%S)}
PY=${PYTHON:-python}
DRY=""
$PY -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null || DRY=1
N=$($PY -c "import torch; print(max(torch.cuda.device_count(), 1))" 2>/dev/null || echo 1)
mkdir -p "$OUT"
FAIL=0
run() {  # run [timeout_s] cmd...: log it; in a dry run only print it
    local t=$1; shift
    echo "+ $*" | tee -a "$OUT/log.txt"
    [ -n "$DRY" ] && return 0
    timeout "$t" "$@" >>"$OUT/log.txt" 2>&1 || { echo "FAILED ($?): $*" | tee -a "$OUT/log.txt"; FAIL=1; }
}
[ -n "$DRY" ] && echo "dry run: no CUDA device here; printing what would run on N GPUs (here N=$N)" | tee "$OUT/log.txt"
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >>"$OUT/log.txt" 2>&1
[ -z "$DRY" ] && nvidia-smi >>"$OUT/log.txt" 2>&1
run 120 $PY -m pytest tests/gpu -q -p no:cacheprovider
run 90 $PY -m rackplan.executor.bench --out "$OUT/bench"
for model in v3 v41; do
    for n in 8 32 72; do
        role=""; [ "$n" != 8 ] && role="--skip-prefill"  # prefill DEP2 is the same in all three
        run 90 $PY -m rackplan.cli execute --plan "configs/plans/$model-replay-dep$n.yaml" --device cuda \
            --ranks "$N" --steps 5 --max-dense-layers 1 --max-moe-layers 2 --timeout 85 $role \
            --out "$OUT/$model-dep$n"
    done
done
if [ "$N" -ge 3 ]; then
    run 90 $PY -m rackplan.cli execute --plan tiny-disagg --device cuda --workload tiny-chat --timeout 85 \
        --out "$OUT/tiny-disagg-serve"
fi
echo "results in $OUT (log.txt, bench/bench.json, */measurements.jsonl)"
exit $FAIL
