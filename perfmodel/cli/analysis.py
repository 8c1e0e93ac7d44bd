"""The trade-off subcommands of `perfmodel`: sweep, scaling, trace, plot (sensitivity and compare: studies.py).

Every output file (--out, --plot) must not exist yet: main() checks them all before the command
computes anything and stops with one line naming the file otherwise (exit code 2; cli/io.py).

sweep, scaling, trace and plot evaluate the plan `--plan` makes for each system or point: a search
(the default; --iterations rounds, --seed), greedy, or a plan file; the plan is named in every
table, title and JSON. A sweep whose points fail in part prints them at the end and exits 0; if
every point failed it exits 1.

sweep, scaling and plot tradeoff / scaling take --uncertainty [N]: p10 / p50 / p90 columns beside
the nominal ones (analysis.sweep, analysis.scaling), a line saying what was drawn, and in plots a
shaded p10-p90 band around each line. A bad N stops the command before any search.
"""

from __future__ import annotations

import json
import sys
import time

from ..config import ConfigError
from . import io
from .args import (CHIPS_HELP, add_chips, add_planning, add_problem, add_uncertainty, executors_of, load_system_arg,
                   planner_of, uncertainty_of)

PLOT_KINDS = ("breakdown", "tradeoff", "scaling", "pareto", "timeline")
DEFAULT_TRADEOFF = ["scale_out_bandwidth_GBps=12.5:400:12:log", "nic_attach_pcie=0,1", "offload_engines=0,16"]


def _load(args, system_attr: str = "system"):
    from .. import load_model
    return load_system_arg(args, system_attr), load_model(args.model)


def _need(args, *names):
    for n in names:
        if not getattr(args, n, None):
            raise ConfigError("", f"--{n.replace('_', '-')}", "is required")


def _varies(specs) -> dict:
    """--vary NAME=VALUES, each knob once, as {name: values}."""
    from ..analysis import parse_vary
    vary = {}
    for spec in specs:
        name, values = parse_vary(spec)
        if name in vary:
            raise ConfigError("", f"vary.{name}", "is given twice")
        vary[name] = values
    return vary


def _ints(text, flag: str, what: str) -> list[int]:
    """Comma-separated integers of a flag, e.g. --chips 16,64; ConfigError naming the flag otherwise."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ConfigError("", flag, f"{text!r} must be comma-separated {what}, e.g. 0,7,63") from None
    if not out:
        raise ConfigError("", flag, f"{text!r} lists no {what}")
    return out


def _at_least_one(value: int, flag: str) -> None:
    if value < 1:
        raise ConfigError("", flag, f"must be an integer >= 1, got {value}")


# ------------------------------------------------------------------------------------------ uncertainty

def _drawn_of(args) -> dict | None:
    """uncertainty_of's arguments with the model's error read once, so that the study and the line
    saying what was drawn use the same one (None without --uncertainty)."""
    drawn = uncertainty_of(args)
    if drawn is not None and drawn["model_error"] is None:
        from ..uncertainty.propagate import load_model_error
        drawn["model_error"] = load_model_error()
    return drawn


def _drawn_kwargs(drawn: dict | None) -> dict:
    """sweep's / scaling's keyword arguments from _drawn_of's (none without --uncertainty)."""
    if drawn is None:
        return {}
    return {"uncertainty": drawn["draws"], "uncertainty_seed": drawn["seed"], "model_error": drawn["model_error"]}


def _as_flag(err: ConfigError) -> ConfigError:
    """A study's error about its uncertainty= argument, named as the flag that gave it."""
    flags = {"uncertainty": "--uncertainty", "uncertainty_seed": "--uncertainty-seed"}
    return ConfigError(err.source, flags[err.field], err.message) if err.field in flags and not err.source else err


def _what_was_drawn(drawn: dict, problems) -> dict:
    """What the draws of a study were (uncertainty.report.about's keys): their count, seed, the
    union of its (system, model) problems' inputs (shared by name) and the model's error."""
    from ..uncertainty.inputs import inputs_of
    from ..uncertainty.propagate import columns_for
    inputs, _ = columns_for([inputs_of(s, m) for s, m in problems])
    return {"draws": drawn["draws"], "seed": drawn["seed"], "inputs": inputs, "model_error": drawn["model_error"]}


def _drawn_header(what: dict) -> str:
    from types import SimpleNamespace

    from ..uncertainty.report import header
    return header(SimpleNamespace(**what))


def _drawn_json(what: dict) -> dict:
    from types import SimpleNamespace

    from ..uncertainty.report import about
    return about(SimpleNamespace(**what))


def _with_intervals(cols: list[str], table) -> list[str]:
    """`cols` with each one's _p10, _p50, _p90 after it where the table has them."""
    from ..analysis.table import columns
    have = set(columns(table))
    out = []
    for c in cols:
        out.append(c)
        out += [f"{c}_{q}" for q in ("p10", "p50", "p90") if f"{c}_{q}" in have]
    return out


# ------------------------------------------------------------------------------------------ sweep

SWEEP_COLUMNS = ["step_ms", "samples_per_s", "exposed_comm_ms", "interference_max_ms", "mfu", "memory_max_GB",
                 "feasible"]


def _sweep_metrics() -> tuple[str, ...]:
    from ..analysis.sweep import COLUMNS
    return tuple(c for c in COLUMNS if c != "feasible")


def _failures(table, knob_names) -> list[str]:
    """'knob=value, ...: why' for every point of a sweep table that could not be evaluated."""
    from ..analysis.table import records
    return [", ".join(f"{n}={r[n]}" for n in knob_names) + f": {r['error']}" for r in records(table) if r["error"]]


def _cmd_sweep(args) -> int:
    from .. import knobs
    from ..analysis import sweep
    from ..analysis.table import format_table, num_rows, records

    if args.list_knobs:
        print(knobs.describe())
        return 0
    _need(args, "system", "model", "vary")
    vary = _varies(args.vary)
    x = args.x or next(iter(vary))
    if x not in vary:
        raise ConfigError("", "--x", f"{x!r} is not one of the varied knobs ({', '.join(vary)})")
    if args.plot and knobs.knob(x).choices:
        raise ConfigError("", "--x", f"{x!r} is a choice, not a number; name a numeric knob for the plot's x axis")
    if args.plot and args.y not in _sweep_metrics():
        raise ConfigError("", "--y", f"{args.y!r} is not a number the sweep computes; one of {', '.join(_sweep_metrics())}")
    make = planner_of(args)
    where = executors_of(args)
    drawn = _drawn_of(args)                # a bad --uncertainty before any search
    system, model = _load(args)
    t0 = time.perf_counter()
    try:
        table = sweep(system, model, vary, plan=make, paired=args.paired, binding=args.binding, **where,
                      **_drawn_kwargs(drawn))
    except ConfigError as err:
        raise _as_flag(err) from None
    wall = time.perf_counter() - t0
    drew = _what_was_drawn(drawn, [(system, model)]) if drawn is not None else None
    failed = _failures(table, list(vary))
    n = num_rows(table)
    if args.out:
        io.save_table(table, args.out)
    if args.plot:
        from .. import plots
        ylabel = plots.METRIC_LABELS.get(args.y, (args.y,))[0].split(" [")[0]
        ax = plots.sweep_lines(table, x, args.y, title=f"{model.name} on {system.name}: {ylabel} vs {x}")
        io.save_figure(ax, args.plot)
    if args.json:
        out = {"system": system.name, "model": model.name, "plan": make.label}
        if drew is not None:
            out["uncertainty"] = _drawn_json(drew)
        print(json.dumps({**out, "rows": records(table)}, indent=1))
    else:
        print(f"{model.name} on {system.name}: {n} points ({'paired' if args.paired else 'grid'}), plan: "
              f"{make.label}{' per point' if make.per_point else ', fixed'}; {wall:.2f} s")
        if drew is not None:
            print(_drawn_header(drew))
        print(format_table(table, list(vary) + _with_intervals(SWEEP_COLUMNS, table)
                           + (["binding", "binding_elasticity"] if args.binding else []) + ["plan"]))
        for p, what in ((args.out, "table"), (args.plot, "plot")):
            if p:
                print(f"wrote {what}: {p}")
    if failed:
        print(f"{len(failed)} of {n} points failed:\n  " + "\n  ".join(failed), file=sys.stderr)
    return 1 if len(failed) == n else 0


# ------------------------------------------------------------------------------------------ scaling

SCALING_COLUMNS = ["chips", "mode", "global_batch", "step_ms", "samples_per_s", "speedup", "efficiency", "replicas",
                   "plan"]


def _scaling_table(args, model, make, where: dict, drawn: dict | None = None):
    """Strong, weak or both scaling tables of --system at --chips, as one table (sizes planned `where`;
    with p10 / p50 / p90 columns where `drawn`, _drawn_of's, is given)."""
    import numpy as np
    from ..analysis.scaling import scaling
    from ..analysis.table import columns, make_table
    _need(args, "chips")
    chips = _ints(args.chips, "--chips", "chip counts")
    modes = ("strong", "weak") if args.mode == "both" else (args.mode,)
    try:
        tables = [columns(scaling(args.system, model, chips, mode=m, plan=make, **where, **_drawn_kwargs(drawn)))
                  for m in modes]
    except ConfigError as err:
        raise _as_flag(err) from None
    return make_table({k: np.concatenate([t[k] for t in tables]) for k in tables[0]})


def _scaling_drawn(args, model, drawn: dict) -> dict:
    """What a scaling study's draws were: the inputs of every size of the family (shared by name)."""
    from ..hardware import load_system
    chips = sorted(set(_ints(args.chips, "--chips", "chip counts")))
    return _what_was_drawn(drawn, [(load_system(args.system, chips=n), model) for n in chips])


def _cmd_scaling(args) -> int:
    from .. import load_model
    from ..analysis.table import format_table, records

    make = planner_of(args)
    where = executors_of(args)
    drawn = _drawn_of(args)                # a bad --uncertainty before any search
    model = load_model(args.model)
    table = _scaling_table(args, model, make, where, drawn)
    drew = _scaling_drawn(args, model, drawn) if drawn is not None else None
    if args.out:
        io.save_table(table, args.out)
    if args.json:
        out = {"system": args.system, "model": model.name, "plan": make.label}
        if drew is not None:
            out["uncertainty"] = _drawn_json(drew)
        print(json.dumps({**out, "rows": records(table)}, indent=1))
        return 0
    print(f"{model.name} on {args.system}'s family: scaling ({args.mode}), plan: {make.label} per size")
    if drew is not None:
        print(_drawn_header(drew))
    print(format_table(table, _with_intervals(SCALING_COLUMNS, table)))
    if args.out:
        print(f"wrote table: {args.out}")
    return 0


# ------------------------------------------------------------------------------------------ trace

def _devices(args, system):
    """--devices as ranks of `system` (None: sampled), checked before anything is evaluated."""
    if args.devices is None:
        return None
    ranks = _ints(args.devices, "--devices", "ranks")
    bad = [d for d in ranks if not 0 <= d < system.num_chips]
    if bad:
        raise ConfigError("", "--devices", f"rank {bad[0]} does not exist: {system.name} has ranks 0..{system.num_chips - 1}")
    return ranks


def _cmd_trace(args) -> int:
    from .. import evaluate
    from ..trace import chrome_trace

    _at_least_one(args.max_devices, "--max-devices")
    make = planner_of(args)
    system, model = _load(args)
    devices = _devices(args, system)
    bd = evaluate(system, model, make(system, model))
    tr = chrome_trace(bd, model, devices=devices, max_devices=args.max_devices,
                      title=f"{model.name} on {system.name}, plan: {make.label}")
    io.save_trace(tr, args.out)
    n = sum(1 for e in tr["traceEvents"] if e["ph"] == "X")
    print(f"wrote {args.out}: one step of {model.name} on {system.name} ({float(bd.step_s) * 1e3:.3f} ms, plan: "
          f"{make.label}), devices {tr['otherData']['shown_devices']} of {system.num_chips}, {n} slices; "
          "open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


# ------------------------------------------------------------------------------------------ plot

def _cmd_plot(args) -> int:
    _at_least_one(args.max_devices, "--max-devices")
    from .. import load_model, plots
    from ..analysis import sweep
    from ..analysis.scaling import compare, evaluate_systems

    kind = args.kind
    if args.uncertainty is not None and kind not in ("tradeoff", "scaling"):
        raise ConfigError("", "--uncertainty", f"applies to plot tradeoff and scaling (bands around their lines), "
                          f"not {kind}")
    make = planner_of(args)
    where = executors_of(args)
    drawn = _drawn_of(args)                # a bad --uncertainty before any search
    model = load_model(args.model)
    if kind in ("breakdown", "pareto"):
        _need(args, "systems")
        if args.chips is not None:
            raise ConfigError("", "--chips", f"does not apply to plot {kind}: name each system at its size in "
                              "--systems (e.g. mtia300-64,h100-64)")
        names = [s.strip() for s in args.systems.split(",") if s.strip()]
        if not names:
            raise ConfigError("", "--systems", f"{args.systems!r} lists no system; give names, e.g. mtia300-64,h100-64")
        bds = evaluate_systems(names, model, plan=make, **where)
        if kind == "breakdown":
            ax = plots.breakdown(bds, title=f"{model.name}: where the step goes (slowest device; plan: {make.label})")
        else:
            x = {"usd": "usd_per_million_samples", "power": "power_W"}[args.x or "usd"]
            ax = plots.pareto(compare(names, model, plan=make, breakdowns=bds), x=x,
                              title=f"{model.name}: throughput vs " + ("cost" if x.startswith("usd") else "power"))
    else:
        _need(args, "system")
        if kind == "tradeoff":
            system, _ = _load(args)
            vary = _varies(args.vary or DEFAULT_TRADEOFF)
            if "scale_out_bandwidth_GBps" not in vary:
                raise ConfigError("", "--vary", "plot tradeoff needs scale_out_bandwidth_GBps among the knobs")
            try:
                table = sweep(system, model, vary, plan=make, **where, **_drawn_kwargs(drawn))
            except ConfigError as err:
                raise _as_flag(err) from None
            ax = plots.tradeoff(table, title=f"{model.name} on {system.name}: step time vs scale-out NIC bandwidth")
        elif kind == "scaling":
            ax = plots.scaling(_scaling_table(args, model, make, where, drawn),
                               title=f"{model.name} on {args.system.rsplit('-', 1)[0]}: scaling")
        else:  # timeline
            from .. import evaluate
            system, _ = _load(args)
            devices = _devices(args, system)
            bd = evaluate(system, model, make(system, model))
            ax = plots.timeline(bd, devices=devices, max_devices=args.max_devices, model=model,
                                title=f"{model.name} on {system.name}: one step (plan: {make.label})")
    io.save_figure(ax, args.out)
    print(f"wrote {args.out}")
    return 0


# ------------------------------------------------------------------------------------------ parser

def register(sub) -> None:
    """Add sweep, scaling, trace and plot to the `perfmodel` subparsers."""
    sw = sub.add_parser(
        "sweep", help="the model over a grid (or paired lists) of hardware, workload and plan knobs",
        description="Evaluate MODEL on SYSTEM at every point of a grid of knob values, each hardware point with "
                    "the plan --plan makes for it (searched in parallel), in one vectorized evaluation. "
                    "Values: a:b:n (n points, linear), a:b:n:log (geometric), or x,y,z. "
                    "`--list-knobs` lists every knob with its unit. Failed points are listed at the end; the exit "
                    "code is 1 only if every point failed. Output files are never overwritten. --uncertainty N adds "
                    "<col>_p10, _p50 and _p90 columns: every point at the same N draws (a swept knob overrides the "
                    "draw of what it sets), the plot shaded from p10 to p90.")
    sw.add_argument("--system", help="system preset (e.g. mtia300-64) or TOML path")
    add_chips(sw)
    sw.add_argument("--model", help="model preset (e.g. rec-150b) or TOML path")
    sw.add_argument("--chip", help="replace the system's chip by this chip preset or TOML")
    sw.add_argument("--vary", action="append", metavar="KNOB=VALUES",
                    help="a knob and its values, e.g. scale_out_bandwidth_GBps=25:400:16 (repeat for a grid)")
    sw.add_argument("--paired", action="store_true", help="pair the value lists (equal lengths) instead of a grid")
    add_planning(sw, executors=True)
    io.add_output(sw, "--out", io.TABLE, help="write the table: .csv, or .json for records (never overwritten)")
    io.add_output(sw, "--plot", io.FIGURE, help="write a plot (PNG/SVG/PDF) of --y against --x, a line per other knob value")
    sw.add_argument("--x", help="knob on the plot's x axis (default: the first --vary)")
    sw.add_argument("--y", default="step_ms", help="column on the plot's y axis (default step_ms)")
    sw.add_argument("--binding", action="store_true", help="add the resource that bounds each point's step (compute, "
                    "HBM, scale-up links, NIC, PCIe cap, host memory, latency, launch and host: the one whose 1 %% "
                    "moves the step most at the point's plan) and that elasticity; one gradient per point")
    add_uncertainty(sw, "each point's step, throughput, cost and energy")
    sw.add_argument("--list-knobs", action="store_true", help="describe every knob and exit")
    sw.add_argument("--json", action="store_true", help="print the table as JSON records")
    sw.set_defaults(func=_cmd_sweep)

    sc = sub.add_parser(
        "scaling", help="throughput and scaling efficiency of a system family at several chip counts",
        description="MODEL on SYSTEM's family at each of --chips, strong (fixed global batch) and/or weak (batch "
                    "per chip fixed) scaling, each size with the plan --plan makes for it. --uncertainty N adds "
                    "<col>_p10, _p50 and _p90 columns: every size at the same N draws, the efficiency taken draw by "
                    "draw against the smallest size's.")
    sc.add_argument("--system", required=True, help="a system preset of the family (any size, e.g. h100-64)")
    sc.add_argument("--model", required=True, help="model preset or TOML path")
    sc.add_argument("--chips", required=True, help="chip counts, e.g. 16,64,256")
    sc.add_argument("--mode", default="both", choices=("strong", "weak", "both"), help="scaling mode (default both)")
    add_planning(sc, executors=True)
    add_uncertainty(sc, "each size's step, throughput and efficiency")
    io.add_output(sc, "--out", io.TABLE, help="write the table: .csv, or .json for records (never overwritten)")
    sc.add_argument("--json", action="store_true", help="print the table as JSON records")
    sc.set_defaults(func=_cmd_scaling)

    tr = sub.add_parser(
        "trace", help="one step as Chrome trace-event JSON (Perfetto, chrome://tracing)",
        description="Write one training step as a Chrome trace: a process per device (a sample when there are "
                    "many), threads for the compute stream, the communication stream and compute idle time.")
    add_problem(tr)
    io.add_output(tr, "--out", io.TRACE, required=True, help="trace JSON to write (never overwritten)")
    tr.add_argument("--devices", help="ranks to show, e.g. 0,7,63 (default: slowest, fastest, evenly spaced)")
    tr.add_argument("--max-devices", type=int, default=8, help="devices shown when sampling (default 8)")
    tr.set_defaults(func=_cmd_trace)

    pl = sub.add_parser(
        "plot", help="figures: breakdown, tradeoff, scaling, pareto, timeline",
        description="breakdown: stacked phases per system (--systems); tradeoff: step time vs scale-out NIC "
                    "bandwidth, integrated vs PCIe NIC, with and without offload engines (--system, --vary to "
                    "change); scaling: throughput and efficiency vs chips (--system, --chips, --mode); pareto: "
                    "throughput vs cost or power (--systems, --x usd|power); timeline: per-device Gantt chart "
                    "of one step (--system, --devices). Each system is evaluated with the plan --plan makes for it. "
                    "tradeoff and scaling take --uncertainty N: each line shaded from p10 to p90.")
    pl.add_argument("kind", choices=PLOT_KINDS)
    pl.add_argument("--model", required=True, help="model preset or TOML path")
    pl.add_argument("--systems", help="comma-separated systems (breakdown, pareto)")
    pl.add_argument("--system", help="one system (tradeoff, scaling: any size of the family, timeline)")
    pl.add_argument("--chip", help="replace the system's chip (tradeoff, timeline)")
    add_planning(pl, executors=True)
    pl.add_argument("--vary", action="append", metavar="KNOB=VALUES", help="tradeoff knobs (default: "
                    + " ".join(DEFAULT_TRADEOFF) + ")")
    add_chips(pl, help="scaling: a list of chip counts, e.g. 16,64,256; tradeoff and timeline: " + CHIPS_HELP)
    pl.add_argument("--mode", default="both", choices=("strong", "weak", "both"), help="scaling mode (default both)")
    pl.add_argument("--x", choices=("usd", "power"), help="pareto: cost (usd, default) or power on the x axis")
    pl.add_argument("--devices", help="timeline: ranks to show")
    pl.add_argument("--max-devices", type=int, default=4, help="timeline: devices shown when sampling (default 4)")
    add_uncertainty(pl, "the lines of tradeoff and scaling (shaded from p10 to p90)")
    io.add_output(pl, "--out", io.FIGURE, required=True, help="image to write (PNG, SVG or PDF; never overwritten)")
    pl.set_defaults(func=_cmd_plot)
