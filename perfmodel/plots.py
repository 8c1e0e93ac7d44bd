"""Plots of the model's answers (matplotlib). Each function takes a result and an optional Axes,
draws on it (a new figure if none) and returns the Axes; `save_figure` writes it (never overwriting).

  breakdown   where the step goes per system: compute phases, interference and exposed
              communication on the slowest device; the collectives on the communication stream
  sweep_lines a metric against one knob of a sweep table, one line per combination of the others
              (a shaded p10-p90 band around each where the table has them: sweep(uncertainty=N))
  tradeoff    sweep_lines for step time against scale-out NIC bandwidth (integrated vs PCIe NIC,
              offload engines vs core-driven collectives)
  scaling     throughput and scaling efficiency against chip count (weak and/or strong; bands
              where the table has p10 / p90: scaling(uncertainty=N))
  pareto      throughput against cost or power across systems, the Pareto front drawn
  timeline    a per-device Gantt chart of one step: compute and communication streams, exposed
              communication hatched

Times are drawn in ms, throughput in M samples/s, power in kW. Headless use: MPLBACKEND=Agg (the
CLI and perfmodel.figures set it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import knobs as K
from .analysis.table import columns
from .config import ConfigError
from .evaluate import COMM_PHASES, PHASES, Breakdown
from .files import check_output, check_place, open_new
from .trace import COMPUTE_PHASES, check_times, device_slices, pick_devices

PHASE_COLORS = {
    "bottom_fwd": "#9ecae1", "top_fwd": "#4292c6", "top_bwd": "#2171b5", "bottom_bwd": "#6baed6",
    "emb_fwd": "#74c476", "emb_bwd": "#238b45", "optimizer": "#969696", "overhead": "#fec44f",
    "input_dist": "#fdae6b", "output_dist": "#f16913", "grad_dist": "#a63603", "dense_sync": "#8c6bb1",
    "comm_s beyond the phases": "#bdbdbd",
}
INTERFERENCE = dict(color="#fb9a99", hatch="xx", edgecolor="#e31a1c", label="interference (compute slowed by collectives)")
EXPOSED = dict(color="#ffffff", hatch="///", edgecolor="#e31a1c", label="exposed communication (compute idle)")

METRIC_LABELS = {     # table column -> (axis label, factor from the column's unit to the label's)
    "step_ms": ("step time [ms]", 1.0), "exposed_comm_ms": ("exposed communication [ms]", 1.0),
    "comm_busy_ms": ("communication busy [ms]", 1.0), "compute_busy_max_ms": ("compute busy, slowest device [ms]", 1.0),
    "interference_max_ms": ("interference [ms]", 1.0), "samples_per_s": ("throughput [M samples/s]", 1e-6),
    "mfu": ("MFU [%]", 100.0), "memory_max_GB": ("HBM per device, max [GB]", 1.0),
    "host_memory_max_GB": ("host memory per device, max [GB]", 1.0),
    "scale_out_link_GBps": ("scale-out link, effective [GB/s]", 1.0),
    "scale_up_link_GBps": ("scale-up link, effective [GB/s]", 1.0),
    "usd_per_million_samples": ("cost [$ per million samples]", 1.0),
    "joules_per_sample": ("energy [mJ per sample]", 1e3), "power_W": ("power, all hosts [kW]", 1e-3),
    "slowdown_max": ("compute slowdown [x]", 1.0),
}


def _ax(ax, figsize=(8, 4.5)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt
    _, ax = plt.subplots(figsize=figsize, layout="constrained")
    return ax


def _metric(name: str) -> tuple[str, float]:
    if name in METRIC_LABELS:
        return METRIC_LABELS[name]
    if name.endswith("_ms"):
        return f"{name[:-3]} [ms]", 1.0
    return name, 1.0


BAND_ALPHA = 0.25


def _band(ax, c: dict, col: str, idx, xs, scale: float, order, color) -> None:
    """A shaded band from `col`_p10 to `col`_p90 of the rows `idx` (the x values `xs`, drawn in
    `order`), where the table has them (a study run with uncertainty=N)."""
    lo, hi = f"{col}_p10", f"{col}_p90"
    if lo not in c or hi not in c:
        return
    y0 = np.asarray(c[lo], np.float64)[idx][order] * scale
    y1 = np.asarray(c[hi], np.float64)[idx][order] * scale
    ax.fill_between(xs[order], y0, y1, color=color, alpha=BAND_ALPHA, lw=0)


def _with_plan(title: str | None, c: dict) -> str | None:
    """The title with the plan the table's rows were evaluated under (its `plan` column), if one."""
    plans = list(dict.fromkeys(str(p) for p in c.get("plan", [])))
    if len(plans) != 1:
        return title
    return f"{title} (plan: {plans[0]})" if title else f"plan: {plans[0]}"


def _knob_label(name: str) -> str:
    return K.KNOBS[name].label() if name in K.KNOBS else name


def _value_label(name: str, v) -> str:
    if name == "nic_attach_pcie":
        return {0: "integrated NIC", 1: "NIC behind PCIe"}.get(float(v), f"PCIe share {float(v):g}")
    if name == "offload_engines":
        return "core-driven collectives" if float(v) == 0 else f"{int(v)} offload engines"
    if isinstance(v, (float, np.floating)):
        return f"{name}={float(v):g}"
    return f"{name}={v}"


# ------------------------------------------------------------------------------------------ breakdown

def breakdown(results, ax=None, title: str | None = None, intervals: dict | None = None):
    """Stacked phase breakdown per system. `results`: {label: Breakdown} (or (label, Breakdown) pairs);
    `intervals`: {label: (p10, p90)} of the step in seconds, drawn as an error bar at its end.

    Two bars per system. "compute": the slowest device's compute phases (busy time), the interference
    added by overlapping collectives and the exposed communication up to the step time; it adds up
    to the step. "comm": the collectives' busy times on the communication stream (overlapped with
    compute where the compute bar is busy).
    """
    items = list(results.items()) if isinstance(results, dict) else list(results)
    ax = _ax(ax, (9, 1.3 + 1.25 * len(items)))
    seen = {}
    yt, yl = [], []
    for i, (label, bd) in enumerate(items):
        comp = np.asarray(bd.compute_s)
        d = int(np.argmax(comp))
        step = float(bd.step_s)
        y = -3.0 * i
        left = 0.0
        for p in COMPUTE_PHASES:
            w = float(np.asarray(bd.phase_s[p])[d]) * 1e3
            if w > 0:
                seen[p] = ax.barh(y, w, left=left, height=0.8, color=PHASE_COLORS[p], edgecolor="white", lw=0.5, label=p)
                left += w
        w = float(np.asarray(bd.interference_s)[d]) * 1e3
        if w > 0:
            seen["interference"] = ax.barh(y, w, left=left, height=0.8, lw=0.5, **INTERFERENCE)
            left += w
        w = max(step * 1e3 - left, 0.0)
        if w > 1e-9:
            seen["exposed"] = ax.barh(y, w, left=left, height=0.8, lw=0.5, **EXPOSED)
        left = 0.0
        total = float(bd.comm_s) * 1e3
        for p in COMM_PHASES:
            w = float(np.max(np.asarray(bd.phase_s[p]))) * 1e3
            if w > 0:
                seen[p] = ax.barh(y - 1, w, left=left, height=0.8, color=PHASE_COLORS[p], edgecolor="white", lw=0.5, label=p)
                left += w
        if total - left > 1e-6 * total:
            k = "comm_s beyond the phases"
            seen[k] = ax.barh(y - 1, total - left, left=left, height=0.8, color=PHASE_COLORS[k], edgecolor="white",
                              lw=0.5, label="other communication (chunking, parameter all-gather)")
        ax.plot([step * 1e3] * 2, [y + 0.5, y - 1.5], color="black", lw=1.2)
        band = ""
        if intervals and label in intervals:
            lo, hi = (v * 1e3 for v in intervals[label])
            ax.errorbar([step * 1e3], [y + 0.2], xerr=[[max(step * 1e3 - lo, 0.0)], [max(hi - step * 1e3, 0.0)]],
                        fmt="none", ecolor="black", elinewidth=1.0, capsize=3)
            band = f" (p10-p90 {lo:#.3g}-{hi:#.3g})"
        ax.text(step * 1e3, y + 0.55, f" {step * 1e3:#.3g} ms{band}, {float(bd.samples_per_s) / 1e6:#.3g} M samples/s",
                va="bottom", ha="right", fontsize=8)
        yt += [y, y - 1]
        yl += [f"{label}\ncompute (device {d})", "communication"]
    ax.set_yticks(yt, yl, fontsize=8)
    ax.set_xlabel("time per training step [ms]")
    ax.set_xlim(left=0)
    ax.set_ylim(-3.0 * len(items) + 1.2, 1.6)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(title or "Where the step goes (slowest device; black line: step time)", fontsize=10)
    order = [k for k in list(PHASES) + ["comm_s beyond the phases", "interference", "exposed"] if k in seen]
    ax.legend([seen[k] for k in order], [seen[k].get_label() for k in order], fontsize=7, ncol=4,
              loc="upper center", bbox_to_anchor=(0.5, -0.14 - 0.2 / max(len(items), 1)), frameon=False)
    return ax


# ------------------------------------------------------------------------------------------ sweeps

def sweep_lines(table, x: str, y: str = "step_ms", by: list[str] | None = None, ax=None,
                logx: bool | None = None, title: str | None = None):
    """`y` against knob `x` of a sweep table, one line per combination of the `by` columns (default:
    every other knob column with more than one value). Infeasible points (over memory) get a red x.
    A table with `y`_p10 and `y`_p90 (sweep(uncertainty=N)) gets a shaded band between them."""
    c = columns(table)
    if x not in c or y not in c:
        from .config import ConfigError
        raise ConfigError("", "plot", f"the table has no column {x if x not in c else y!r}; columns: {', '.join(c)}")
    if c[x].dtype == object:
        from .config import ConfigError
        raise ConfigError("", "plot", f"x = {x!r} is a choice, not a number; put a numeric knob on the x axis")
    if c[y].dtype == object:
        from .config import ConfigError
        raise ConfigError("", "plot", f"y = {y!r} is not a number; put a metric column (step_ms, ...) on the y axis")
    ax = _ax(ax)
    if by is None:
        by = [k for k in c if k in K.KNOBS and k != x and len(set(map(str, c[k]))) > 1]
    ylab, yscale = _metric(y)
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]
    styles = ["-", "--", ":", "-."]
    markers = ["o", "s", "^", "D", "v"]
    keys = [tuple(str(c[b][i]) for b in by) for i in range(len(c[x]))]
    uniq = list(dict.fromkeys(keys))
    levels = [list(dict.fromkeys(str(v) for v in c[b])) for b in by]
    xs_all = np.asarray(c[x], np.float64)
    for key in uniq:
        idx = np.asarray([k == key for k in keys])
        xs, ys = xs_all[idx], np.asarray(c[y], np.float64)[idx] * yscale
        o = np.argsort(xs)
        style = {}
        if by:
            style["color"] = colors[levels[0].index(key[0]) % len(colors)]
        if len(by) > 1:
            style["linestyle"] = styles[levels[1].index(key[1]) % len(styles)]
        if len(by) > 2:
            style["marker"] = markers[levels[2].index(key[2]) % len(markers)]
        else:
            style["marker"] = "o"
        label = ", ".join(_value_label(b, c[b][np.flatnonzero(idx)[0]]) for b in by) or y
        line, = ax.plot(xs[o], ys[o], ms=3, lw=1.6, label=label, **style)
        _band(ax, c, y, idx, xs, yscale, o, line.get_color())
        if "feasible" in c:
            bad = ~np.asarray(c["feasible"], bool)[idx][o]
            if bad.any():
                ax.plot(xs[o][bad], ys[o][bad], "x", color="red", ms=7, mew=2)
    pos = xs_all[xs_all > 0]
    if logx is None:
        logx = len(pos) == len(xs_all) and pos.max() / pos.min() >= 20
    if logx:
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(_knob_label(x))
    ax.set_ylabel(ylab)
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    if by:
        ax.legend(fontsize=8)
    title = _with_plan(title, c)
    if title:
        ax.set_title(title, fontsize=10)
    return ax


def tradeoff(table, ax=None, y: str = "step_ms", title: str | None = None):
    """Step time against scale-out NIC bandwidth, a line per NIC attachment / engine count (the
    other knob columns of the table)."""
    return sweep_lines(table, "scale_out_bandwidth_GBps", y, ax=ax,
                       title=title or "Step time vs scale-out NIC bandwidth")


# ------------------------------------------------------------------------------------------ scaling

def scaling(table, ax=None, title: str | None = None):
    """Throughput (solid, left axis; dashed: ideal linear scaling from the smallest size) and scaling
    efficiency (dotted, right axis) against chips, one colour per mode (strong / weak); shaded p10-p90
    bands where the table has them (scaling(uncertainty=N))."""
    c = columns(table)
    ax = _ax(ax)
    ax2 = ax.twinx()
    modes = list(dict.fromkeys(str(m) for m in c["mode"])) if "mode" in c else ["strong"]
    colors = {"strong": "#1f77b4", "weak": "#d62728", "weak 2D": "#9467bd"}
    ideal = {}
    for mode in modes:
        idx = np.asarray([str(m) == mode for m in c["mode"]]) if "mode" in c else np.ones(len(c["chips"]), bool)
        n = np.asarray(c["chips"], np.float64)[idx]
        thr = np.asarray(c["samples_per_s"], np.float64)[idx] * 1e-6
        eff = np.asarray(c["efficiency"], np.float64)[idx] * 100
        o = np.argsort(n)
        col = colors.get(mode, "#2ca02c")
        ax.plot(n[o], thr[o], "o-", color=col, lw=1.8, label=f"{mode} scaling: throughput")
        ax2.plot(n[o], eff[o], "s:", color=col, lw=1.2, ms=4, label=f"{mode} scaling: efficiency (right axis)")
        _band(ax, c, "samples_per_s", idx, n, 1e-6, o, col)
        _band(ax2, c, "efficiency", idx, n, 100.0, o, col)
        key = (tuple(n[o]), round(float(thr[o][0]), 9))
        if key not in ideal:
            ideal[key] = ax.plot(n[o], thr[o][0] * n[o] / n[o][0], "--", color="#7f7f7f", lw=1,
                                 label="ideal (linear from the smallest size)" if not ideal else None)
    from matplotlib.ticker import FuncFormatter, NullFormatter
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    chips_all = sorted({float(v) for v in c["chips"]})
    ax.set_xticks(chips_all)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    from matplotlib.ticker import LogLocator
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("chips")
    ax.set_ylabel("throughput [M samples/s]")
    ax2.set_ylabel("scaling efficiency [%]")
    ax2.set_ylim(0, 110)
    ax.grid(alpha=0.3, which="both")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    ax.set_title(_with_plan(title or "Scaling: throughput and efficiency vs chips", c), fontsize=10)
    return ax


# ------------------------------------------------------------------------------------------ pareto

def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Mask of the points no other point beats on both (lower x, higher y)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    keep = np.ones(len(x), bool)
    for i in range(len(x)):
        dominated = (x <= x[i]) & (y >= y[i]) & ((x < x[i]) | (y > y[i]))
        keep[i] = not dominated.any()
    return keep


def pareto(table, x: str = "usd_per_million_samples", y: str = "samples_per_s", ax=None,
           label: str = "system", title: str | None = None):
    """Throughput against cost (or power: x="power_W") per system (a `compare` table); the Pareto
    front (nothing both cheaper and faster) joined and labelled, dominated points grey; p10-p90 error
    bars where the table has `<x>_p10` ... `<y>_p90` columns."""
    c = columns(table)
    ax = _ax(ax)
    xl, xs_ = _metric(x)
    yl, ys_ = _metric(y)
    xv = np.asarray(c[x], np.float64) * xs_
    yv = np.asarray(c[y], np.float64) * ys_
    ok = np.asarray(c["feasible"], bool) if "feasible" in c else np.ones(len(xv), bool)
    front = pareto_front(np.where(ok, xv, np.inf), np.where(ok, yv, -np.inf)) & ok
    if all(f"{k}_{q}" in c for k in (x, y) for q in ("p10", "p90")):      # a table with error bars
        err = lambda k, v, sc: [np.maximum(v - np.asarray(c[f"{k}_p10"], np.float64) * sc, 0.0),
                                np.maximum(np.asarray(c[f"{k}_p90"], np.float64) * sc - v, 0.0)]
        ax.errorbar(xv, yv, xerr=err(x, xv, xs_), yerr=err(y, yv, ys_), fmt="none", ecolor="#9e9e9e", elinewidth=0.8,
                    capsize=2, zorder=1, label="p10-p90")
    ax.scatter(xv[~front], yv[~front], color="#bdbdbd", s=30, zorder=2, label="dominated")
    ax.scatter(xv[front], yv[front], color="#d62728", s=45, zorder=3, label="Pareto front")
    o = np.argsort(xv[front])
    ax.plot(xv[front][o], yv[front][o], "-", color="#d62728", lw=1, zorder=2)
    groups: dict[tuple, list[str]] = {}          # systems at the same point share one label
    for i in range(len(xv)):
        key = (float(f"{xv[i]:.4g}"), float(f"{yv[i]:.4g}"))
        groups.setdefault(key, []).append(str(c[label][i]) + ("" if ok[i] else " (does not fit)"))
    span = lambda v: (np.nanmax(v) - np.nanmin(v)) or 1.0
    placed: list[tuple[float, float]] = []
    for (xk, yk), names in groups.items():      # labels of nearby points step down so they stay legible
        u, v = xk / span(xv), yk / span(yv)
        k = sum(1 for a, b in placed if abs(a - u) < 0.12 and abs(b - v) < 0.06)
        placed.append((u, v))
        ax.annotate(", ".join(names), (xk, yk), textcoords="offset points", xytext=(5, 5 - 11 * k), fontsize=7)
    ax.set_xlabel(xl + (" (placeholder prices)" if x == "usd_per_million_samples" else ""))
    ax.set_ylabel(yl)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(_with_plan(title or "Throughput vs " + xl.split(" [")[0], c), fontsize=10)
    return ax


# ------------------------------------------------------------------------------------------ waterfall

def waterfall(start_s: float, deltas_s: list[float], end_s: float, labels: list[str], ax=None,
              title: str | None = None, intervals: list | None = None):
    """Step time from `start_s` through each delta (green: faster, red: slower) to `end_s`, e.g. an
    attribution's shares then its rest; labels: the start, one per delta, the end. `intervals`: a
    (p10, p90) in seconds for each bar (the start, each delta, the end; None where there is none),
    drawn as an error bar at the bar's moving end and printed under its value."""
    ax = _ax(ax, (9, 4.6))
    ms = 1e3
    bottoms, heights, colors, level = [0.0], [start_s * ms], ["#7f7f7f"], start_s * ms
    for d in deltas_s:
        bottoms.append(min(level, level + d * ms))
        heights.append(abs(d) * ms)
        colors.append("#2ca02c" if d < 0 else "#d62728")
        level += d * ms
    bottoms.append(0.0)
    heights.append(end_s * ms)
    colors.append("#1f77b4")
    ax.bar(range(len(labels)), heights, bottom=bottoms, color=colors)
    # each bar's moving end: the level after it (a delta's bar runs from the level before to this)
    ends = list(np.cumsum([start_s * ms, *(d * ms for d in deltas_s)])) + [end_s * ms]
    values = [start_s, *deltas_s, end_s]
    for i, (b, h, d) in enumerate(zip(bottoms, heights, [None, *deltas_s, None])):
        text = f"{h:.3f} ms" if d is None else f"{d * ms:+.3f}"
        iv = intervals[i] if intervals is not None else None
        if iv is not None:
            lo, hi = sorted(v * ms for v in iv)
            x = values[i] * ms                 # the end moves by (p - value) as the value does
            ax.errorbar([i], [ends[i]], yerr=[[max(x - lo, 0.0)], [max(hi - x, 0.0)]], fmt="none", ecolor="black",
                        elinewidth=1.0, capsize=3)
            text += f"\n[{lo:+.3f}, {hi:+.3f}]" if d is not None else f"\n[{lo:.3f}, {hi:.3f}]"
        ax.text(i, b + h, text, ha="center", va="bottom", fontsize=7 if iv is not None else 8)
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel("step time [ms]")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    if title:
        ax.set_title(title, fontsize=9)
    return ax


# ------------------------------------------------------------------------------------------ timeline

def timeline(bd: Breakdown, ax=None, devices: list[int] | None = None, max_devices: int = 4,
             model=None, title: str | None = None):
    """Gantt chart of one step: for each device (the slowest, the fastest and evenly spaced ones
    unless `devices` is given) a compute row (phases; interference as a hatched tail; exposed
    communication hatched red where compute idles while a collective runs) and a communication row."""
    check_times(bd)
    picks = pick_devices(bd, devices, max_devices)
    ax = _ax(ax, (10, 0.9 + 1.1 * len(picks)))
    seen = {}
    yt, yl = [], []
    for i, (d, why) in enumerate(picks):
        y = -2.6 * i
        for s in device_slices(bd, d, model):
            a, w = s.start_s * 1e3, s.dur_s * 1e3
            if s.stream == "compute":
                busy = s.args.get("busy_s", s.dur_s) * 1e3
                seen[s.name] = ax.barh(y, min(busy, w), left=a, height=0.8, color=PHASE_COLORS[s.name],
                                       edgecolor="white", lw=0.4, label=s.name)
                if w - busy > 1e-9:
                    seen["interference"] = ax.barh(y, w - busy, left=a + busy, height=0.8, lw=0.4, **INTERFERENCE)
            elif s.stream == "comm":
                key = s.name if s.name in PHASE_COLORS else "comm_s beyond the phases"
                lab = key if key in PHASES else "other communication (chunking, parameter all-gather)"
                seen[key] = ax.barh(y - 1, w, left=a, height=0.8, color=PHASE_COLORS[key], edgecolor="white",
                                    lw=0.4, label=lab)
            elif s.name == "exposed communication":
                seen["exposed"] = ax.barh(y, w, left=a, height=0.8, lw=0.4, **EXPOSED)
        yt += [y, y - 1]
        yl += [f"device {d}" + (f"\n({why})" if why else "") + "\ncompute", "comm"]
    step = float(bd.step_s) * 1e3
    ax.axvline(step, color="black", lw=1.2)
    ax.text(step, 0.6, f" step {step:#.3g} ms", fontsize=8, va="bottom", ha="right")
    ax.set_yticks(yt, yl, fontsize=7)
    ax.set_xlabel("time in the step [ms]")
    ax.set_xlim(0, step * 1.01)
    ax.set_ylim(-2.6 * len(picks) + 1.4, 1.3)
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(title or "One training step per device (what overlaps and what is exposed)", fontsize=10)
    order = [k for k in list(PHASES) + ["comm_s beyond the phases", "interference", "exposed"] if k in seen]
    ax.legend([seen[k] for k in order], [seen[k].get_label() for k in order], fontsize=7, ncol=5,
              loc="upper center", bbox_to_anchor=(0.5, -0.1 - 0.25 / max(len(picks), 1)), frameon=False)
    return ax


# ------------------------------------------------------------------------------------------ files

def figure_formats() -> tuple[str, ...]:
    """The file suffixes matplotlib writes figures in ('.png', '.svg', '.pdf', ...)."""
    from matplotlib.backend_bases import FigureCanvasBase
    return tuple(f".{k}" for k in sorted(FigureCanvasBase.get_supported_filetypes()))


def check_figure_path(path: str | Path) -> Path:
    """ConfigError naming `path` unless a new figure can be written there (see files.check_output),
    in a format its suffix names."""
    return check_output(path, figure_formats(), "figure")


def save_figure(ax_or_fig, path: str | Path, overwrite: bool = False, dpi: int = 150) -> Path:
    """Write the figure of an Axes (or a Figure) as PNG/SVG/PDF (the suffix says which) and close
    it. Refuses to overwrite an existing file unless overwrite=True, and a suffix matplotlib has no
    writer for (ConfigError naming the file)."""
    import matplotlib.pyplot as plt
    fig = getattr(ax_or_fig, "figure", ax_or_fig)
    p = Path(path)
    if p.suffix.lower() not in figure_formats():
        raise ConfigError(str(p), "", f"is not a figure name: give one ending in {', '.join(figure_formats())}")
    if not overwrite:
        check_place(p)                # a refused name leaves the figure open, to be written elsewhere
    try:
        if overwrite:
            fig.savefig(p, dpi=dpi, bbox_inches="tight")
        else:
            with open_new(p, binary=True) as f:
                fig.savefig(f, format=p.suffix.lower()[1:], dpi=dpi, bbox_inches="tight")
    except OSError as err:
        raise ConfigError(str(p), "", f"cannot be written: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return p
