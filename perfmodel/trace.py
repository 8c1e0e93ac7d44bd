"""One step as per-device, per-stream slices, and as Chrome trace-event JSON (Perfetto, chrome://tracing).

`device_slices(bd, d)` lays the step of device d out on three rows:

  compute  the compute phases at their [start, end) in the Breakdown. They are sequential in the
           schedule, and each lasts its busy time plus the interference charged to it, so the row
           adds up to Breakdown.compute_s[d].
  comm     the collectives. The Breakdown gives each a window [start, end) and a busy time; a window
           can be longer than the busy time (a chunked all-to-all waits for compute) and windows can
           overlap (the dense gradient buckets interleave with the gradient all-to-all). Each
           collective is placed in the free time of its window, as late as possible (as early as
           possible for those that gate compute), split around what is already there; what does not
           fit spills to the nearest free time outside and says so in its args. The next batch's
           pipelined input all-to-all (busy time minus this step's part) prefers the backward pass,
           where the model charges its interference. So the row adds up to Breakdown.comm_s, and no
           two slices on it overlap.
  idle     compute idle time in [0, step): "exposed communication" while a collective runs, else
           "waiting". For the slowest device it adds up to Breakdown.exposed_comm_s.

comm_s can exceed the sum of the communication phases (the chunking overhead of the all-to-alls is
in comm_s, not in phase_s; a fully sharded or hybrid dense part's parameter all-gather is counted in
comm_s besides dense_sync); the excess is shown as its own slice ("comm_s beyond the phases") so
that the row still adds up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .config import ConfigError
from .evaluate import COMM_PHASES, PHASES, Breakdown

COMPUTE_PHASES = tuple(p for p in PHASES if p not in COMM_PHASES)
EPS = 1e-12          # seconds: no slice is shorter
REL_TOL = 1e-6       # x step: gaps and remainders below this are float32 rounding, not time
STREAMS = ("compute", "comm", "idle")


@dataclass
class Slice:
    stream: str                 # "compute" | "comm" | "idle"
    name: str
    start_s: float
    end_s: float
    args: dict = field(default_factory=dict)

    @property
    def dur_s(self) -> float:
        return self.end_s - self.start_s


def _np(bd: Breakdown):
    """A Breakdown's arrays as float64 numpy (once)."""
    f = lambda x: np.asarray(x, np.float64)
    return {
        "phase": {p: f(bd.phase_s[p]) for p in PHASES}, "start": {p: f(bd.start_s[p]) for p in PHASES},
        "end": {p: f(bd.end_s[p]) for p in PHASES}, "step": float(np.asarray(bd.step_s)),
        "compute": f(bd.compute_s), "comm": float(np.asarray(bd.comm_s)), "interference": f(bd.interference_s),
        "bytes": {k: float(np.asarray(v)) for k, v in bd.comm_bytes.items()},
        "exposed": float(np.asarray(bd.exposed_comm_s)),
    }


class _Stream:
    """Occupied intervals of one stream in [0, horizon); places busy time into free gaps."""

    def __init__(self, horizon: float, tol: float):
        self.horizon, self.tol = horizon, max(tol, EPS)
        self.busy: list[tuple[float, float]] = []

    def free(self, lo: float, hi: float) -> list[tuple[float, float]]:
        out, cur = [], lo
        for a, b in sorted(self.busy):
            if b <= cur:
                continue
            if a >= hi:
                break
            if a - cur > self.tol:
                out.append((cur, min(a, hi)))
            cur = max(cur, b)
        if hi - cur > self.tol:
            out.append((cur, hi))
        return out

    def place(self, need: float, lo: float, hi: float, late: bool) -> tuple[list[tuple[float, float]], float]:
        """Take up to `need` seconds of free time in [lo, hi), latest (late) or earliest first."""
        gaps = self.free(lo, hi)
        pieces = []
        for a, b in (reversed(gaps) if late else gaps):
            if need <= self.tol:
                break
            take = min(need, b - a)
            piece = (b - take, b) if late else (a, a + take)
            pieces.append(piece)
            need -= take
        self.busy += pieces
        return sorted(pieces), max(need, 0.0)


def _place_task(stream: _Stream, name: str, busy: float, lo: float, hi: float, late: bool,
                args: dict) -> list[Slice]:
    """Slices of one task: in its window first, then spilled outside (nearest side first)."""
    tol = stream.tol
    if busy <= tol:
        return []
    lo, hi = max(lo, 0.0), min(max(hi, lo), stream.horizon)
    inside, rest = stream.place(busy, lo, hi, late)
    outside: list[tuple[float, float]] = []
    if rest > tol:
        sides = [(0.0, lo, True), (hi, stream.horizon, False)] if late else [(hi, stream.horizon, False), (0.0, lo, True)]
        for a, b, lt in sides:
            got, rest = stream.place(rest, a, b, lt)
            outside += got
            if rest <= tol:
                break
    if rest > tol:          # no free time left in the step (does not happen: comm_s <= step)
        end = max([b for _, b in stream.busy] + [stream.horizon])
        outside.append((end, end + rest))
        stream.busy.append(outside[-1])
    pieces = sorted([(a, b, True) for a, b in inside] + [(a, b, False) for a, b in outside])
    out = []
    for i, (a, b, ok) in enumerate(pieces):
        extra = dict(args, window_start_s=lo, window_end_s=hi)
        if len(pieces) > 1:
            extra["part"] = f"{i + 1} of {len(pieces)}"
            extra["task_busy_s"] = busy
        if not ok:
            extra["note"] = ("placed outside its window [window_start_s, window_end_s): the stream had no free "
                             "time left there (the windows of collectives on this stream overlap)")
        out.append(Slice("comm", name, a, b, extra))
    return out


def dense_flops_per_phase(model, num_chips: int) -> dict[str, float]:
    """Dense FLOPs per device of bottom/top forward and backward (2 m n k per sample; backward 2x
    where the GEMM has weights, dX only otherwise), at the local batch."""
    d = model.dense
    f = np.asarray(d.flops_per_sample(), np.float64) * float(model.global_batch) / num_chips
    w = np.asarray(d.weighted, np.float64)
    bottom = np.asarray(d.bottom, bool) if d.bottom else np.zeros_like(f, bool)
    return {"bottom_fwd": float(f[bottom].sum()), "top_fwd": float(f[~bottom].sum()),
            "bottom_bwd": float((f * (1 + w))[bottom].sum()), "top_bwd": float((f * (1 + w))[~bottom].sum())}


def device_slices(bd: Breakdown, device: int, model=None, _cache=None) -> list[Slice]:
    """Non-overlapping slices of device `device` on the compute, comm and idle rows (module doc)."""
    b = _cache or _np(bd)
    d = int(device)
    ph, st, en = b["phase"], b["start"], b["end"]
    step = b["step"]
    tol = REL_TOL * max(step, EPS)
    flops = dense_flops_per_phase(model, len(b["compute"])) if model is not None else {}
    slices: list[Slice] = []

    comp = _Stream(max(step, max(float(en[p][d]) for p in COMPUTE_PHASES)), tol)
    for p in COMPUTE_PHASES:
        a, e, busy = float(st[p][d]), float(en[p][d]), float(ph[p][d])
        args = {"phase": p, "busy_s": busy, "interference_s": max(e - a - busy, 0.0)}
        if p in flops:
            args["flops"] = flops[p]
        for lo, hi in comp.place(e - a, a, e, late=False)[0]:
            slices.append(Slice("compute", p, lo, hi, dict(args)))

    comm = _Stream(step, tol)
    out_dur = float(en["output_dist"][d] - st["output_dist"][d])
    chunk_extra = max(out_dur - float(ph["output_dist"][d]), 0.0)
    in_now = float(en["input_dist"][d] - st["input_dist"][d])
    in_next = max(float(ph["input_dist"][d]) - in_now, 0.0)
    by = b["bytes"]
    in_frac = in_now / max(float(ph["input_dist"][d]), EPS)
    tasks = [
        ("input_dist", in_now, float(st["input_dist"][d]), float(en["input_dist"][d]), False,
         {"bytes": by.get("input_dist", 0.0) * in_frac, "batch": "this step (not pipelined)"}),
        ("output_dist", out_dur, float(st["output_dist"][d]), float(en["output_dist"][d]), False,
         {"bytes": by.get("output_dist", 0.0), "chunking_overhead_s": chunk_extra}),
        ("grad_dist", float(ph["grad_dist"][d]) + chunk_extra, float(st["grad_dist"][d]), float(en["grad_dist"][d]),
         True, {"bytes": by.get("grad_dist", 0.0), "chunking_overhead_s": chunk_extra}),
        ("dense_sync", float(ph["dense_sync"][d]), float(st["dense_sync"][d]), float(en["dense_sync"][d]), True,
         {"bytes": by.get("dense_sync", 0.0)}),
    ]
    placed = sum(t[1] for t in tasks) + in_next
    excess = b["comm"] - placed
    if excess > tol:
        tasks.append(("comm_s beyond the phases", excess, float(en["input_dist"][d]), float(st["top_fwd"][d]), False,
                      {"note": "Breakdown.comm_s minus the communication phases and the chunking overhead (in "
                               "this model: the dense parameter all-gather of a fully sharded or hybrid plan, "
                               "counted in comm_s besides dense_sync)"}))
    tasks.append(("input_dist", in_next, float(st["top_bwd"][d]), float(en["bottom_bwd"][d]), True,
                  {"bytes": by.get("input_dist", 0.0) * (1.0 - in_frac),
                   "batch": "next step (pipelined: overlaps this step's backward)"}))
    for name, busy, lo, hi, late, args in tasks:
        base = {"phase": name.split(" ")[0] if name in PHASES else name, "busy_s": busy, **args}
        slices += _place_task(comm, name, busy, lo, hi, late, base)

    # idle compute: exposed communication where the comm row is busy, else waiting
    comm_iv = sorted((s.start_s, s.end_s) for s in slices if s.stream == "comm")
    for lo, hi in comp.free(0.0, step):
        cur = lo
        for a, c in comm_iv:
            a, c = max(a, lo), min(c, hi)
            if c - a <= tol:
                continue
            if a - cur > tol:
                slices.append(Slice("idle", "waiting", cur, a, {"note": "compute idle, no collective running"}))
            slices.append(Slice("idle", "exposed communication", max(a, cur), c,
                                {"note": "compute idle while a collective runs"}))
            cur = max(cur, c)
        if hi - cur > tol:
            slices.append(Slice("idle", "waiting", cur, hi, {"note": "compute idle, no collective running"}))
    slices = [s for s in slices if s.dur_s > tol]
    return sorted(slices, key=lambda s: (STREAMS.index(s.stream), s.start_s))


def check_times(bd: Breakdown) -> None:
    """ConfigError unless the Breakdown's step and compute times are finite: a timeline of NaN has
    no slices to draw, and JSON has no NaN."""
    if not (np.isfinite(np.asarray(bd.step_s, np.float64)).all() and np.isfinite(np.asarray(bd.compute_s)).all()):
        raise ConfigError("", "breakdown", f"has a step time of {float(np.max(bd.step_s))} s: a timeline needs "
                          "finite times (evaluate a valid system, model and plan)")


def pick_devices(bd: Breakdown, devices, max_devices: int) -> list[tuple[int, str]]:
    """(rank, why) of the devices to show: `devices` (checked against the Breakdown's ranks), else
    sample_devices(bd, max_devices)."""
    if devices is None:
        return sample_devices(bd, max_devices)
    D = len(np.asarray(bd.compute_s))
    ok = lambda d: isinstance(d, (int, np.integer)) and not isinstance(d, bool) and 0 <= d < D
    bad = [d for d in devices if not ok(d)]
    if bad or not devices:
        raise ConfigError("", "devices", f"rank {bad[0]!r} does not exist: ranks 0..{D - 1}" if bad else
                          "lists no rank")
    return [(int(d), "") for d in devices]


def sample_devices(bd: Breakdown, max_devices: int = 8) -> list[tuple[int, str]]:
    """(rank, why) of the devices to show: all if few; else the slowest and fastest compute and
    evenly spaced ranks."""
    if isinstance(max_devices, bool) or not isinstance(max_devices, (int, np.integer)) or max_devices < 1:
        raise ConfigError("", "max_devices", f"must be an integer >= 1, got {max_devices!r}")
    comp = np.asarray(bd.compute_s, np.float64)
    D = len(comp)
    if D <= max_devices:
        return [(d, "") for d in range(D)]
    slow, fast = int(np.argmax(comp)), int(np.argmin(comp))
    chosen = {slow: "slowest compute", fast: "fastest compute"}
    for r in np.linspace(0, D - 1, max_devices).round().astype(int):
        if len(chosen) >= max_devices:
            break
        chosen.setdefault(int(r), "evenly spaced sample")
    return sorted(chosen.items())


def chrome_trace(bd: Breakdown, model=None, devices: list[int] | None = None, max_devices: int = 8,
                 title: str = "") -> dict:
    """Chrome trace-event JSON (a dict) of one step: a process per device, threads compute / comm /
    idle, one complete ("X") slice per task piece, times in microseconds."""
    check_times(bd)
    b = _np(bd)
    picks = pick_devices(bd, devices, max_devices)
    slowest = int(np.argmax(b["compute"]))
    ev = []
    tid = {"compute": 1, "comm": 2, "idle": 3}
    tname = {"compute": "compute stream", "comm": "communication stream", "idle": "compute idle (exposed / waiting)"}
    for order, (d, why) in enumerate(picks):
        label = f"device {d}" + (f" ({why})" if why else "") + (" [slowest]" if d == slowest and "slowest" not in why else "")
        ev.append({"name": "process_name", "ph": "M", "pid": d, "args": {"name": label}})
        ev.append({"name": "process_sort_index", "ph": "M", "pid": d, "args": {"sort_index": order}})
        for s, t in tid.items():
            ev.append({"name": "thread_name", "ph": "M", "pid": d, "tid": t, "args": {"name": tname[s]}})
            ev.append({"name": "thread_sort_index", "ph": "M", "pid": d, "tid": t, "args": {"sort_index": t}})
        for s in device_slices(bd, d, model, b):
            ts = s.start_s * 1e6
            ev.append({"name": s.name, "cat": s.stream, "ph": "X", "pid": d, "tid": tid[s.stream],
                       "ts": ts, "dur": s.end_s * 1e6 - ts, "args": _jsonable(s.args)})
    other = {"title": title, "step_s": b["step"], "comm_busy_s": b["comm"], "exposed_comm_s": b["exposed"],
             "devices": len(b["compute"]), "shown_devices": [d for d, _ in picks],
             "compute_busy_s": {str(d): float(b["compute"][d]) for d, _ in picks},
             "time_unit": "microseconds (ts, dur); args in SI units (seconds, bytes, FLOP)"}
    return {"traceEvents": ev, "displayTimeUnit": "ns", "otherData": other}


def _jsonable(args: dict) -> dict:
    return {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in args.items()}


def save_trace(trace: dict, path: str | Path) -> None:
    """Write a trace as JSON; never overwrites an existing file."""
    from .files import write_new
    write_new(path, json.dumps(trace, allow_nan=False))    # JSON has no NaN: chrome_trace refuses one first
