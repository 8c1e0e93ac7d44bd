"""Readable tables and JSON-ready dicts of a Breakdown, the scalar figures a study reads off one
(summarize: traceable, a sweep's and a draw's), and the progress bar every long command shows."""

from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp

from .config import quiet
from .evaluate import COMM_PHASES, PHASES, Breakdown
from .hardware import System, link_bandwidths

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
    ]
    if bd.replicas > 1:
        lines.append(f"2D plan              {bd.replicas} replicas of sharding groups of {bd.num_chips} chips: the per-device "
                     "figures are one group's (every group does the same)")
    lines += [
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


def per_rank(bd: Breakdown, plan, model) -> list[dict]:
    """Per rank what a sharding planner's report shows (TorchRec prints one after planning): the
    table shards it holds (model-parallel; data-parallel replicas apart), HBM used and free, compute
    and communication busy time, and whether it is the rank that binds the step: the busiest compute
    stream, which every collective then waits for (the others idle for the difference). SI units."""
    D = int(bd.num_chips)
    shards, replicas = np.zeros(D, int), np.zeros(D, int)
    for t in plan.tables.values():         # a plan's ranks are distinct (validate_plan), one per shard or replica
        (replicas if t.sharding_type == "data_parallel" else shards)[list(t.ranks)] += 1
    per = lambda x: np.broadcast_to(np.asarray(x, np.float64), (D,))
    comm = sum(per(bd.phase_s[p]) for p in COMM_PHASES)
    used, cap = per(bd.memory_bytes), float(np.asarray(bd.capacity_bytes))
    compute = per(bd.compute_s)
    binding = int(np.argmax(compute))                       # the first of equals
    return [{"rank": d, "shards": int(shards[d]), "replicas": int(replicas[d]), "hbm_used_bytes": float(used[d]),
             "hbm_free_bytes": cap - float(used[d]), "compute_s": float(compute[d]), "comm_s": float(comm[d]),
             "idle_s": float(compute[binding] - compute[d]), "binding": d == binding} for d in range(D)]


def format_per_rank(rows: list[dict], max_rows: int = 16) -> str:
    """The per-rank report as a table in ms and GB: every rank up to max_rows, else the busiest and a
    count of the rest; the binding rank marked."""
    shown = rows if len(rows) <= max_rows else sorted(rows, key=lambda r: (-r["compute_s"], r["rank"]))[:max_rows]
    lines = [f"{'rank':>6} {'shards':>7} {'replicas':>9} {'HBM used GB':>12} {'free GB':>9} {'compute ms':>11} "
             f"{'comm ms':>9} {'idle ms':>9}"]
    for r in shown:
        lines.append(f"{r['rank']:>6} {r['shards']:>7} {r['replicas']:>9} {r['hbm_used_bytes'] / 1e9:>12.2f} "
                     f"{r['hbm_free_bytes'] / 1e9:>9.2f} {r['compute_s'] * 1e3:>11.3f} {r['comm_s'] * 1e3:>9.3f} "
                     f"{r['idle_s'] * 1e3:>9.3f}" + ("  <- binds the step (busiest)" if r["binding"] else ""))
    if len(rows) > len(shown):
        lines.append(f"({len(rows) - len(shown)} less busy ranks not shown; --json lists every rank)")
    return "\n".join(lines)


def summarize(bd: Breakdown, system: System) -> dict[str, jax.Array]:
    """The scalar figures of one evaluation (traceable; the columns of a sweep table)."""
    up, out = link_bandwidths(system)
    res = {
        "step_s": bd.step_s, "samples_per_s": bd.samples_per_s, "exposed_comm_s": bd.exposed_comm_s,
        "comm_busy_s": bd.comm_s, "compute_busy_max_s": jnp.max(bd.compute_s),
        "interference_max_s": jnp.max(bd.interference_s), "slowdown_max": jnp.max(bd.slowdown), "mfu": bd.mfu,
        "memory_max_bytes": jnp.max(bd.memory_bytes), "memory_capacity_bytes": bd.capacity_bytes,
        "host_memory_max_bytes": jnp.max(bd.host_memory_bytes), "feasible": bd.feasible,
        "usd_per_million_samples": bd.usd_per_million_samples, "joules_per_sample": bd.joules_per_sample,
        "scale_up_link_Bps": up + jnp.zeros(()), "scale_out_link_Bps": out + jnp.zeros(()),
    }
    for p in PHASES:
        res[f"{p}_busy_max_s"] = jnp.max(bd.phase_s[p])
    return res


def announced_bar(line: str | None, total: int, unit: str, unit_scale: bool = False):
    """A tqdm bar on stderr with the time left, after `line` saying what the work is (a log or a pipe
    gets that line only: the bar redraws one line, on a terminal). line None, or --quiet: a no-op bar."""
    import sys
    from tqdm import tqdm
    if line is None or quiet():
        return tqdm(total=total, disable=True)
    print(line, file=sys.stderr, flush=True)
    tty = bool(getattr(sys.stderr, "isatty", lambda: False)())
    return tqdm(total=total, file=sys.stderr, unit=unit, unit_scale=unit_scale, dynamic_ncols=True, mininterval=0.5,
                leave=False, disable=not tty)
