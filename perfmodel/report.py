"""Readable tables and JSON-ready dicts of a Breakdown."""

from __future__ import annotations

import numpy as np

from .evaluate import COMM_PHASES, PHASES, Breakdown

STREAM = {p: ("comm" if p in COMM_PHASES else "compute") for p in PHASES}


def _f(x) -> float:
    return float(np.asarray(x))


def summary(bd: Breakdown) -> dict:
    """Scalar figures of a step (SI units in the keys)."""
    mem = np.asarray(bd.memory_bytes)
    return {
        "step_s": _f(bd.step_s),
        "samples_per_s": _f(bd.samples_per_s),
        "mfu": _f(bd.mfu),
        "exposed_comm_s": _f(bd.exposed_comm_s),
        "comm_busy_s": _f(bd.comm_s),
        "compute_busy_max_s": float(np.max(bd.compute_s)),
        "interference_max_s": float(np.max(bd.interference_s)),
        "interference_slowdown_max": float(np.max(bd.slowdown)),
        "memory_max_bytes": float(mem.max()),
        "memory_capacity_bytes": _f(bd.capacity_bytes),
        "host_memory_max_bytes": float(np.max(bd.host_memory_bytes)),
        "feasible": bool(np.asarray(bd.feasible)),
        "usd_per_million_samples": _f(bd.usd_per_million_samples),
        "joules_per_sample": _f(bd.joules_per_sample),
    }


def to_dict(bd: Breakdown, per_device: bool = False) -> dict:
    """Summary, phases (max over devices: busy, start, end) and memory parts, as plain Python."""
    out = {"summary": summary(bd), "phases": {}, "memory_bytes": {}, "comm_bytes_per_device": {}}
    for p in PHASES:
        out["phases"][p] = {"stream": STREAM[p], "busy_s": float(np.max(bd.phase_s[p])),
                            "start_s": float(np.max(bd.start_s[p])), "end_s": float(np.max(bd.end_s[p]))}
    for k, v in bd.memory_parts.items():
        out["memory_bytes"][k] = float(np.max(v))
    for k, v in bd.comm_bytes.items():
        out["comm_bytes_per_device"][k] = _f(v)
    if per_device:
        out["per_device"] = {
            "compute_s": np.asarray(bd.compute_s).tolist(),
            "memory_bytes": np.asarray(bd.memory_bytes).tolist(),
            "phase_s": {p: np.asarray(bd.phase_s[p]).tolist() for p in PHASES},
        }
    return out


def _t(s: float) -> str:
    s = float(s)
    if s >= 1.0:
        return f"{s:8.3f} s "
    if s >= 1e-3:
        return f"{s * 1e3:8.3f} ms"
    return f"{s * 1e6:8.1f} us"


def _b(n: float) -> str:
    n = float(n)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:8.2f} {unit}"
    return f"{n:8.0f} B "


def format_breakdown(bd: Breakdown, title: str = "") -> str:
    s = summary(bd)
    lines = []
    if title:
        lines += [title, "=" * len(title)]
    lines += [
        f"step time            {_t(s['step_s'])}      throughput {s['samples_per_s'] / 1e6:10.3f} M samples/s",
        f"MFU (dense)          {100 * s['mfu']:8.2f} %       exposed communication {_t(s['exposed_comm_s'])}",
        f"compute busy (max)   {_t(s['compute_busy_max_s'])}      communication busy    {_t(s['comm_busy_s'])}",
        f"interference         {_t(s['interference_max_s'])}      compute slowdown      {s['interference_slowdown_max']:8.3f} x",
        f"HBM per device (max) {_b(s['memory_max_bytes'])} of {_b(s['memory_capacity_bytes']).strip()}"
        f"   {'fits' if s['feasible'] else 'DOES NOT FIT'}",
        f"cost                 {s['usd_per_million_samples']:8.4f} $ per million samples (placeholder prices)",
        f"energy               {s['joules_per_sample'] * 1e3:8.3f} mJ per sample",
        "",
        f"{'phase':<12} {'stream':<8} {'busy (max)':>12} {'start':>12} {'end':>12}",
    ]
    for p in PHASES:
        lines.append(f"{p:<12} {STREAM[p]:<8} {_t(np.max(bd.phase_s[p])):>12} "
                     f"{_t(np.max(bd.start_s[p])):>12} {_t(np.max(bd.end_s[p])):>12}")
    lines += ["", f"{'memory (max over devices)':<28}"]
    for k, v in bd.memory_parts.items():
        lines.append(f"  {k:<26} {_b(np.max(v))}")
    return "\n".join(lines)
