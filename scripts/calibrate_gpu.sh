#!/usr/bin/env bash
# Calibrate perfmodel's chip model on this machine's NVIDIA GPU (JAX's CUDA build), and keep the
# result in the repository:
#
#   data/measurements/local/<gpu>_<date>.csv    every measurement with the model's prediction and split
#   data/measurements/local/<gpu>_<date>.json   the report (held-out median / p90 errors, fitted values)
#   data/chips/<gpu>-cal-<date>.toml            the fitted chip, a preset: perfmodel evaluate --chip <gpu>-cal-<date>
#
# The chip goes to data/chips (not data/measurements) because every TOML under data/ is checked as a
# preset by tests/test_presets.py; the calibrated GPU chip is one, with a source on every number.
#
# Usage: scripts/calibrate_gpu.sh [grid]        grid: gpu (default; ~5 min on one H100), quick, tiny
# Needs: an NVIDIA GPU, its driver (nvidia-smi), and JAX with CUDA:  pip install -U "jax[cuda12]"
set -euo pipefail
cd "$(dirname "$0")/.."
GRID="${1:-gpu}"
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3

command -v nvidia-smi >/dev/null || { echo "calibrate_gpu.sh: nvidia-smi not found: no NVIDIA GPU or driver here" >&2; exit 2; }
export XLA_PYTHON_CLIENT_PREALLOCATE=false          # the benchmarks allocate what they need, no more
"$PY" - <<'PYEOF' || { echo 'calibrate_gpu.sh: JAX sees no GPU; install its CUDA build: pip install -U "jax[cuda12]"' >&2; exit 2; }
import jax, sys
sys.exit(0 if jax.devices()[0].platform == "gpu" else 1)
PYEOF

NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
SLUG="$(echo "$NAME" | tr '[:upper:]' '[:lower:]' | sed -e 's/nvidia//' -e 's/[^a-z0-9]\+/-/g' -e 's/^-//' -e 's/-$//')"
DATE="$(date +%F)"
case "$NAME" in                                      # the published chip whose peaks and network it keeps
  *H800*) BASE=h800 ;; *H200*) BASE=h200 ;; *H100*) BASE=h100 ;; *B200*) BASE=b200 ;; *A100*) BASE=a100 ;;
  *) BASE=h100; echo "calibrate_gpu.sh: no preset for '$NAME'; its unmeasured fields come from h100" >&2 ;;
esac
mkdir -p data/measurements/local
CHIP="data/chips/${SLUG}-cal-${DATE}.toml"
CSV="data/measurements/local/${SLUG}_${DATE}.csv"
JSON="data/measurements/local/${SLUG}_${DATE}.json"
for f in "$CHIP" "$CSV" "$JSON"; do
  [ -e "$f" ] && { echo "calibrate_gpu.sh: $f exists already; move it away first" >&2; exit 2; }
done

echo "calibrating $NAME (base preset $BASE, grid $GRID) -> $CHIP" >&2
"$PY" -m perfmodel calibrate --device local --out "$CHIP" --base "$BASE" --grid "$GRID" --dtype bf16 \
      --peaks base --measurements "$CSV" --json > "$JSON"
"$PY" - "$JSON" <<'PYEOF'
import json, sys
from perfmodel.calibrate import format_report
print(format_report(json.load(open(sys.argv[1]))))
PYEOF
echo "wrote $CHIP, $CSV, $JSON" >&2
