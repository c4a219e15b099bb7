#!/usr/bin/env bash
# The GPU kit's one command on a lent H100 / H200 (no network there; torch and Triton installed, simpy not).
# Installs the project offline from the wheelhouse .whl/ (benchmarks/gpukit_wheelhouse.py builds it here and
# the device call carries it), then runs `python -m rackplan.executor.gpukit` from a scratch folder (from the
# checkout's root, ./rackplan would shadow the installed package). Results: $OUT (the device call's), at most
# 8 files: kit.log (this log), summary.md, results.tgz. Arguments go to the kit (--rehearse: CPU rehearsal).
# usage: bash executor/gpukit/run.sh [--rehearse] [--budget S]   (PYTHON=: the interpreter; GPUKIT_WHEELS=: the wheels)
set -u -o pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$root/gpukit-out}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/kit.log") 2>&1
site=$(mktemp -d /tmp/gpukit-site.XXXXXX)
shopt -s nullglob
wheels=("${GPUKIT_WHEELS:-$root/.whl}"/*.whl)
if [ ${#wheels[@]} -eq 0 ]; then
    echo "gpukit: no wheels in ${GPUKIT_WHEELS:-$root/.whl} (run: python benchmarks/gpukit_wheelhouse.py, then carry .whl)"
    exit 4
fi
echo "gpukit: offline install of ${#wheels[@]} wheels into $site"
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}" \
    || { echo "gpukit: offline install failed"; exit 4; }
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
cd "$(mktemp -d /tmp/gpukit-work.XXXXXX)" || exit 4
"$PY" -c "import rackplan.executor.gpukit, simpy, sys; print('gpukit: rackplan from', rackplan.__file__)" \
    || { echo "gpukit: the installed project does not import"; exit 4; }
timeout "${GPUKIT_TIMEOUT:-570}" "$PY" -m rackplan.executor.gpukit --out "$OUT" "$@"
rc=$?
echo "gpukit: exit $rc"; ls -la "$OUT"
exit $rc
