"""Runs a notebook top to bottom for the tests (nbclient, the venv's python3 kernel) in a given folder,
with papermill's convention for parameters: a cell placed after the notebook's cell tagged
"parameters" sets new values, so a test can give a search fewer rounds than a reader's run."""

import os
import time
from pathlib import Path

import nbclient
import nbformat

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def execute(name: str, cwd: Path, **parameters):
    """(the executed notebook, its wall time in s). Raises if parameters are given to a notebook
    without a "parameters" cell, or name one that cell does not set."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    if parameters:
        at = [i for i, c in enumerate(nb.cells) if "parameters" in c.metadata.get("tags", [])]
        assert len(at) == 1, f"{name}: one cell tagged 'parameters' expected, found {len(at)}"
        declared = nb.cells[at[0]].source
        for k in parameters:
            assert f"\n{k} = " in "\n" + declared, f"{name}: its parameters cell does not set {k}"
        cell = nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in parameters.items()),
                                         metadata={"tags": ["injected-parameters"]})
        nb.cells.insert(at[0] + 1, cell)
    # the kernel draws inline (PNG outputs), whatever backend this test process chose
    env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    t = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(cwd)}}).execute(env=env)
    return nb, time.perf_counter() - t


def outputs(nb, kind: str) -> list:
    """The notebook's outputs of one kind: "image" (PNG), "markdown", "stream" or "error"."""
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            data = o.get("data", {})
            if kind == "image" and "image/png" in data:
                out.append(data["image/png"])
            elif kind == "markdown" and "text/markdown" in data:
                out.append(data["text/markdown"])
            elif kind == "stream" and o.get("output_type") == "stream":
                out.append(o["text"])
            elif kind == "error" and o.get("output_type") == "error":
                out.append(f"{o.get('ename')}: {o.get('evalue')}")
    return out
