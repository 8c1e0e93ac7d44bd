"""Validation of the contention model (cost/contention.py) against published measurements of compute
slowed by a concurrent collective (data/measurements/contention/interference.csv; its README says
where each comes from). Only the rows that give times of a kernel alone and overlapped, or of a
whole iteration, are predictable; each case below names its row and what the model is told:

  a100-gpt    8 x A100, NCCL all-gather next to a GEMM, an attention and an elementwise kernel of GPT
              training (NVIDIA/nccl#1428). The shapes are not stated: each kernel is taken as its
              diagnosis in the source says, HBM-bandwidth-bound, and the all-gather as outlasting
              it at the a100 preset's large-message rate. Predicted: the kernel's time overlapped.
  h100-matmul 8 x H100, an 8192^3 fp16 matmul and an all-gather of 64 MiB per rank (pytorch PR
              172714): one after the other, overlapped with NCCL's SM kernels, overlapped with
              copy-engine NCCL (no SMs, DMA traffic). Predicted: the iteration's time.

Error: predicted / measured - 1; target within +-25 % (TARGET).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..config import DATA_DIR, ConfigError
from ..cost import collectives as coll
from ..cost import contention
from ..cost.compute import gemm_parts, roofline
from .csvfile import read_rows

CONTENTION = DATA_DIR / "measurements" / "contention"
TARGET = 0.25
_RING = jnp.asarray(np.eye(len(coll.REGISTRY), dtype=np.float32)[coll.RING])


# the columns the cases read; a time is a positive number of microseconds (an iteration's, in the note)
COLUMNS = ("compute_kernel", "compute_alone_us", "compute_overlapped_us", "source", "note")
MAX_US = 1e9


def load_rows(folder: str | Path | None = None) -> list[tuple[str, dict]]:
    """(where, row) of interference.csv in `folder` (default data/measurements/contention)."""
    folder = Path(folder) if folder else CONTENTION
    return read_rows(folder / "interference.csv", COLUMNS, "contention measurement")


def _find(rows, source: str, kernel: str, folder) -> tuple[str, dict]:
    for where, r in rows:
        if source in r["source"] and kernel in r["compute_kernel"]:
            return where, r
    raise ConfigError(str(Path(folder or CONTENTION) / "interference.csv"), "compute_kernel",
                      f"no row of {source} with {kernel!r}")


def _us(text, where: str, field: str) -> float:
    """A time in microseconds from a cell: a positive finite number (a negative or NaN one printed
    '-2451us' or 'nan%' as an error)."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and 0 < v <= MAX_US):
        raise ConfigError(where, field, f"must be a time from 0 (excluded) to {MAX_US:g} us, got {text!r}")
    return v


def _iteration_us(r: dict, where: str) -> float:
    """The whole iteration's time, which the pytorch rows give in their note: 'total iteration time X ms'."""
    try:
        ms = r["note"].split("total iteration time ")[1].split(" ms")[0]
    except IndexError:
        raise ConfigError(where, "note", "must say 'total iteration time <X> ms' (the iteration's time), got "
                          f"{r['note']!r}") from None
    return _us(ms, where, "note") * 1e3


def _matmul_model(n: int, dtype_bytes: float):
    """A one-GEMM model: an n^3 matmul as `local_batch` = n samples of an n x n weight."""
    from ..workload import Dense, RankingModel, EmbeddingTables
    f = lambda x: jnp.asarray(x, jnp.float32)
    dense = Dense(m=f([1.0]), n=f([n]), k=f([n]), weighted=f([1.0]), bias=f([0.0]), elementwise=f([0.0]),
                  bottom=(False,), layer=("matmul",))
    # one placeholder table (the case is a GEMM): every per-table field 1, uniform access, no top-share curve
    one = {fl.name: f([1.0]) for fl in dataclasses.fields(EmbeddingTables) if not fl.metadata.get("static")}
    tables = EmbeddingTables(**dict(one, access_zipf=f([0.0]), access_top_frac=f([[1.0]]), access_top_share=f([[1.0]]),
                                    access_top_known=f([0.0])), names=("t",))
    return RankingModel(tables=tables, dense=dense, global_batch=f(n), param_bytes=f(dtype_bytes),
                        activation_bytes=f(dtype_bytes), dense_opt_values=f(0.0), dense_dtype="bf16", name="matmul")


def _rate(system, comm_s, traffic_bytes, engines: bool):
    chip = system.chip
    mult = chip.dma_hbm_mult if engines else chip.core_hbm_mult
    return mult * traffic_bytes / comm_s


def _all_gather(system, out_bytes):
    """Time and bytes sent + received per chip of a ring all-gather of `out_bytes` per chip."""
    net = coll.make_net(system, 0.0)
    n = system.num_chips
    t = float(coll.all_gather(net, jnp.float32(out_bytes), 0, len(system.levels) - 1, _RING))
    return t, 2.0 * out_bytes * (n - 1) / n


def cases(folder=None) -> list[dict]:
    """Every case's measured and predicted times (module docstring)."""
    from ..hardware import load_system
    rows = load_rows(folder)
    # every measured time checked before anything is computed
    gpt = {}
    for kernel in ("GEMM", "attention", "elementwise"):
        where, r = _find(rows, "NVIDIA/nccl/issues/1428", kernel, folder)
        gpt[kernel] = r, _us(r["compute_alone_us"], where, "compute_alone_us"), _us(r["compute_overlapped_us"], where,
                                                                                    "compute_overlapped_us")
    iteration = {}
    for kernel in ("sequential", "SM-driven", "copy-engine"):
        where, r = _find(rows, "pytorch/pull/172714", kernel, folder)
        iteration[kernel] = r, _iteration_us(r, where)
    out = []

    a100 = load_system("a100-8")
    t_big, traffic = _all_gather(a100, 2.0**30)              # bandwidth-bound: the rate that matters
    beta = 1.0 + float(contention.hbm_excess(a100.chip, _rate(a100, t_big, traffic, engines=False)))
    for kernel in ("GEMM", "attention", "elementwise"):
        r, alone, meas = gpt[kernel]
        out.append({"case": f"a100-gpt {kernel}", "system": "a100-8", "measured_us": meas, "predicted_us": alone * beta,
                    "alone_us": alone, "what": "kernel overlapped (taken HBM-bound, all-gather outlasting it)",
                    "source": r["source"]})

    h100 = load_system("h100-8")
    fwd, _ = gemm_parts(h100.chip, _matmul_model(8192, 2.0), 8192.0)
    gemm = float(roofline(fwd).sum())
    c, traffic = _all_gather(h100, 8 * 64 * 2.0**20)
    for kernel, mode in (("sequential", None), ("SM-driven", "cores"), ("copy-engine", "dma")):
        r, meas = iteration[kernel]
        if mode is None:
            pred = (gemm + c) * 1e6
        else:
            held = h100.chip.core_compute_fraction if mode == "cores" else 0.0
            du = contention.unit_excess(h100.chip, jnp.float32(held))
            db = contention.hbm_excess(h100.chip, _rate(h100, c, traffic, engines=mode == "dma"))
            excess = contention.gemm_excess(fwd, du, db)
            span = gemm + float(contention.added(jnp.float32(gemm), excess, jnp.float32(c)))
            pred = max(span, c) * 1e6
        out.append({"case": f"h100-matmul {kernel}", "system": "h100-8", "measured_us": meas, "predicted_us": pred,
                    "alone_us": gemm * 1e6, "what": "iteration: 8192^3 fp16 matmul + all-gather of 64 MiB per rank",
                    "source": r["source"].split(" ;")[0]})
    for c_ in out:
        c_["err"] = c_["predicted_us"] / c_["measured_us"] - 1.0
    return out


def format_cases(rows: list[dict]) -> str:
    lines = [f"contention (data/measurements/contention/interference.csv): {sum(abs(r['err']) <= TARGET for r in rows)} "
             f"of {len(rows)} cases within {100 * TARGET:.0f} %",
             f"  {'case':<26} {'alone':>9} {'measured':>9} {'model':>9} {'err':>7}   what"]
    for r in rows:
        flag = "" if abs(r["err"]) <= TARGET else " !"
        lines.append(f"  {r['case']:<26} {r['alone_us']:>7.0f}us {r['measured_us']:>7.0f}us {r['predicted_us']:>7.0f}us "
                     f"{100 * r['err']:>6.1f}%{flag:2} {r['what']}")
    return "\n".join(lines)
