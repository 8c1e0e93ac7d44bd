#!/usr/bin/env bash
# Build a separate virtual environment for benchmarks/vs_torchrec.py: perfmodel (editable) plus
# TorchRec's planner on the CPU. Nothing is added to the main .venv.
#
#   bash benchmarks/torchrec_env.sh            # creates .venv-torchrec/ (or $TORCHREC_VENV)
#   .venv-torchrec/bin/python benchmarks/vs_torchrec.py
#
# torch comes as a CPU wheel (the CPU index's "+cpu" build, or a local wheel found through pip's
# configured find-links); torchrec and fbgemm-gpu-cpu are installed with --no-deps so that pip never
# pulls a CUDA torch, and their few run-time imports are listed here instead.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TORCHREC_VENV:-$ROOT/.venv-torchrec}"
PYTHON="${PYTHON:-python3}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
TORCHREC_VERSION="${TORCHREC_VERSION:-1.8.0}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
echo '*' > "$VENV/.gitignore"          # the environment never shows up in `git status`
PIP="$VENV/bin/pip"
"$PIP" install --quiet --upgrade pip

# 1. perfmodel itself (its own deps: jax, optax, numpy, ...)
"$PIP" install --quiet -e "$ROOT"

# 2. a CPU torch. A plain "torch==X" may resolve to the CUDA build on PyPI; prefer the CPU build:
#    a local "+cpu" wheel if pip's find-links has one, else PyTorch's CPU index.
if ! "$PIP" install --quiet "torch==${TORCH_VERSION}+cpu" 2>/dev/null; then
    if ! "$PIP" install --quiet "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu; then
        echo "torchrec_env.sh: no CPU wheel of torch ${TORCH_VERSION} could be installed" >&2
        exit 1
    fi
fi

# 3. TorchRec's planner and the CPU build of fbgemm, without their (CUDA) dependency pins
"$PIP" install --quiet --no-deps "torchrec==${TORCHREC_VERSION}" "fbgemm-gpu-cpu==${TORCHREC_VERSION}"

# 4. what `import torchrec.distributed.planner` needs at run time, and pytest for tests_torchrec/ (pyre-extensions brings typing-inspect;
#    iopath, which torchrec.datasets imports, is not needed by the planner). torch is named again so that
#    tensordict's or torchmetrics' requirements cannot swap the CPU build for another one.
"$PIP" install --quiet "torch==${TORCH_VERSION}+cpu" tensordict "torchmetrics==1.0.3" tqdm pyre-extensions pytest

# 5. check: the torch is a CPU one, and the planner imports
"$VENV/bin/python" - <<'PY'
import torch
assert torch.version.cuda is None, f"a CUDA torch was installed ({torch.__version__}); expected a CPU build"
import torchrec
from torchrec.distributed.planner import EmbeddingShardingPlanner  # noqa: F401
print(f"torch {torch.__version__} (CPU), torchrec {getattr(torchrec, '__version__', '?')}: planner imports")
PY
echo "ready: $VENV/bin/python benchmarks/vs_torchrec.py"
