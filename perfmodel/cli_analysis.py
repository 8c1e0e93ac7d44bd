"""The trade-off subcommands of `perfmodel`: sweep, sensitivity, trace, plot.

Every output file (--out, --plot) must not exist yet: the command checks them all before it
computes anything and stops with one line naming the file otherwise (exit code 2).
"""

from __future__ import annotations

import json
import time

from .cli import CHIPS_HELP, add_chips
from .config import ConfigError

PLOT_KINDS = ("breakdown", "tradeoff", "scaling", "pareto", "timeline")
DEFAULT_TRADEOFF = ["scale_out_bandwidth_GBps=12.5:400:12:log", "nic_attach_pcie=0,1", "offload_engines=0,16"]


def _agg():
    import matplotlib
    matplotlib.use("Agg")


def _load(args, system_attr: str = "system"):
    from . import load_model
    from .cli import load_system_arg
    return load_system_arg(args, system_attr), load_model(args.model)


def _plan(args, system, model):
    from . import default_plan, load_plan
    if getattr(args, "plan", None) is None:
        return default_plan(system, model)
    return load_plan(args.plan, system, model)


def _need(args, *names):
    for n in names:
        if not getattr(args, n, None):
            raise ConfigError("", f"--{n.replace('_', '-')}", "is required")


TABLE_FORMATS = (".csv", ".json")


def _check_outputs(*outputs):
    """(path, kind) of each output ("table", "figure", "trace"; a path may be None): each a new file
    of its kind that can be written, checked before any work (see table.check_output)."""
    from .analysis.table import check_output
    seen = set()
    for p, kind in outputs:
        if p is None:
            continue
        if p in seen:
            raise ConfigError(p, "", "is given twice as an output")
        seen.add(p)
        if kind == "figure":
            _agg()
            from .plots import check_figure_path
            check_figure_path(p)
        else:
            check_output(p, TABLE_FORMATS if kind == "table" else (), kind)


def _varies(specs) -> dict:
    """--vary NAME=VALUES, each knob once, as {name: values}."""
    from .analysis import parse_vary
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


# ------------------------------------------------------------------------------------------ sweep

def _cmd_sweep(args) -> int:
    from .analysis import knobs, sweep
    from .analysis.table import format_table, records, save_table

    if args.list_knobs:
        print(knobs.describe())
        return 0
    _need(args, "system", "model", "vary")
    vary = _varies(args.vary)
    _check_outputs((args.out, "table"), (args.plot, "figure"))
    x = args.x or next(iter(vary))
    if x not in vary:
        raise ConfigError("", "--x", f"{x!r} is not one of the varied knobs ({', '.join(vary)})")
    if args.plot and knobs.knob(x).choices:
        raise ConfigError("", "--x", f"{x!r} is a choice, not a number; name a numeric knob for the plot's x axis")
    system, model = _load(args)
    plan = "replan" if args.plan == "replan" else _plan(args, system, model)
    t0 = time.perf_counter()
    table = sweep(system, model, vary, plan=plan, paired=args.paired)
    wall = time.perf_counter() - t0
    if args.out:
        save_table(table, args.out)
    if args.plot:
        from . import plots
        ylabel = plots.METRIC_LABELS.get(args.y, (args.y,))[0].split(" [")[0]
        ax = plots.sweep_lines(table, x, args.y, title=f"{model.name} on {system.name}: {ylabel} vs {x}")
        plots.save_figure(ax, args.plot)
    if args.json:
        print(json.dumps({"system": system.name, "model": model.name, "plan": args.plan or "default",
                          "rows": records(table)}, indent=1))
        return 0
    plan_txt = {"replan": "re-planned per point (default plan)", None: "default plan of the base system, fixed"}
    n = len(next(iter(table[k] for k in table)))
    print(f"{model.name} on {system.name}: {n} points ({'paired' if args.paired else 'grid'}), plan: "
          f"{plan_txt.get(args.plan, args.plan)}; {wall:.2f} s")
    cols = list(vary) + ["step_s", "samples_per_s", "exposed_comm_s", "interference_max_s", "mfu",
                         "memory_max_bytes", "feasible"]
    print(format_table(table, cols))
    for p, what in ((args.out, "table"), (args.plot, "plot")):
        if p:
            print(f"wrote {what}: {p}")
    return 0


# ------------------------------------------------------------------------------------------ sensitivity

def _cmd_sensitivity(args) -> int:
    from .analysis.sensitivity import format_sensitivity, sensitivity
    from .analysis.table import records

    system, model = _load(args)
    plan = _plan(args, system, model)
    table = sensitivity(system, model, plan, metric=args.metric)
    if args.json:
        print(json.dumps({"system": system.name, "model": model.name, "metric": args.metric,
                          "rows": records(table)}, indent=1))
        return 0
    top = None if args.top == 0 else args.top
    title = f"{model.name} on {system.name}, plan: {args.plan or 'default (greedy) plan'}: elasticities of {args.metric}"
    print(format_sensitivity(table, args.metric, top, title))
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
    from . import evaluate
    from .trace import chrome_trace, save_trace

    _check_outputs((args.out, "trace"))
    _at_least_one(args.max_devices, "--max-devices")
    system, model = _load(args)
    devices = _devices(args, system)
    plan = _plan(args, system, model)
    bd = evaluate(system, model, plan)
    tr = chrome_trace(bd, model, devices=devices, max_devices=args.max_devices, title=f"{model.name} on {system.name}")
    save_trace(tr, args.out)
    n = sum(1 for e in tr["traceEvents"] if e["ph"] == "X")
    print(f"wrote {args.out}: one step of {model.name} on {system.name} ({float(bd.step_s) * 1e3:.3f} ms), "
          f"devices {tr['otherData']['shown_devices']} of {system.num_chips}, {n} slices; "
          "open it in https://ui.perfetto.dev or chrome://tracing")
    return 0


# ------------------------------------------------------------------------------------------ plot

def _cmd_plot(args) -> int:
    _check_outputs((args.out, "figure"))
    _at_least_one(args.max_devices, "--max-devices")
    from . import load_model, plots
    from .analysis import sweep
    from .analysis.scaling import compare, evaluate_systems, scaling

    kind = args.kind
    model = load_model(args.model)
    if kind in ("breakdown", "pareto"):
        _need(args, "systems")
        if args.chips is not None:
            raise ConfigError("", "--chips", f"does not apply to plot {kind}: name each system at its size in "
                              "--systems (e.g. mtia300-64,h100-64)")
        names = [s.strip() for s in args.systems.split(",") if s.strip()]
        if not names:
            raise ConfigError("", "--systems", f"{args.systems!r} lists no system; give names, e.g. mtia300-64,h100-64")
        bds = evaluate_systems(names, model)
        if kind == "breakdown":
            ax = plots.breakdown(bds, title=f"{model.name}: where the step goes (slowest device)")
        else:
            x = {"usd": "usd_per_million_samples", "power": "power_W"}[args.x or "usd"]
            ax = plots.pareto(compare(names, model, breakdowns=bds), x=x, title=f"{model.name}: throughput vs "
                              + ("cost" if x.startswith("usd") else "power"))
    else:
        _need(args, "system")
        if kind == "tradeoff":
            system, _ = _load(args)
            vary = _varies(args.vary or DEFAULT_TRADEOFF)
            if "scale_out_bandwidth_GBps" not in vary:
                raise ConfigError("", "--vary", "plot tradeoff needs scale_out_bandwidth_GBps among the knobs")
            table = sweep(system, model, vary)
            ax = plots.tradeoff(table, title=f"{model.name} on {system.name}: step time vs scale-out NIC bandwidth")
        elif kind == "scaling":
            _need(args, "chips")
            chips = _ints(args.chips, "--chips", "chip counts")
            modes = ("strong", "weak") if args.mode == "both" else (args.mode,)
            tables = [scaling(args.system, model, chips, mode=m) for m in modes]
            from .analysis.table import columns, make_table
            import numpy as np
            cols = {k: np.concatenate([columns(t)[k] for t in tables]) for k in columns(tables[0])}
            ax = plots.scaling(make_table(cols), title=f"{model.name} on {args.system.rsplit('-', 1)[0]}: scaling")
        else:  # timeline
            from . import evaluate
            system, _ = _load(args)
            devices = _devices(args, system)
            bd = evaluate(system, model, _plan(args, system, model))
            ax = plots.timeline(bd, devices=devices, max_devices=args.max_devices, model=model,
                                title=f"{model.name} on {system.name}: one step")
    plots.save_figure(ax, args.out)
    print(f"wrote {args.out}")
    return 0


# ------------------------------------------------------------------------------------------ parser

def _add_problem(p) -> None:
    """The arguments that name one problem: system, model, optional chip and plan."""
    p.add_argument("--system", required=True, help="system preset or TOML path")
    add_chips(p)
    p.add_argument("--model", required=True, help="model preset or TOML path")
    p.add_argument("--chip", help="replace the system's chip by this chip preset or TOML")
    p.add_argument("--plan", help="plan JSON; default: the greedy default plan")


def register(sub) -> None:
    """Add sweep, sensitivity, trace and plot to the `perfmodel` subparsers."""
    sw = sub.add_parser(
        "sweep", help="the model over a grid (or paired lists) of hardware, workload and plan knobs",
        description="Evaluate MODEL on SYSTEM at every point of a grid of knob values, in one vectorized call. "
                    "Values: a:b:n (n points, linear), a:b:n:log (geometric), or x,y,z. "
                    "`--list-knobs` lists every knob with its unit. Output files are never overwritten.")
    sw.add_argument("--system", help="system preset (e.g. mtia300-64) or TOML path")
    add_chips(sw)
    sw.add_argument("--model", help="model preset (e.g. rec-150b) or TOML path")
    sw.add_argument("--chip", help="replace the system's chip by this chip preset or TOML")
    sw.add_argument("--vary", action="append", metavar="KNOB=VALUES",
                    help="a knob and its values, e.g. scale_out_bandwidth_GBps=25:400:16 (repeat for a grid)")
    sw.add_argument("--paired", action="store_true", help="pair the value lists (equal lengths) instead of a grid")
    sw.add_argument("--plan", help="plan JSON (fixed), or 'replan' to re-plan at every point; default: the base "
                                   "system's default plan, fixed")
    sw.add_argument("--out", help="write the table: .csv, or .json for records (never overwritten)")
    sw.add_argument("--plot", help="write a plot (PNG/SVG/PDF) of --y against --x, a line per other knob value")
    sw.add_argument("--x", help="knob on the plot's x axis (default: the first --vary)")
    sw.add_argument("--y", default="step_s", help="column on the plot's y axis (default step_s)")
    sw.add_argument("--list-knobs", action="store_true", help="describe every knob and exit")
    sw.add_argument("--json", action="store_true", help="print the table as JSON records")
    sw.set_defaults(func=_cmd_sweep)

    se = sub.add_parser(
        "sensitivity", help="elasticities of step time (or cost) w.r.t. every hardware parameter, ranked",
        description="d log(metric) / d log(parameter) for every hardware parameter of SYSTEM (one jax.grad), "
                    "ranked by size: +1 % in the parameter changes the metric by elasticity %.")
    _add_problem(se)
    se.add_argument("--metric", default="step_s", choices=("step_s", "usd_per_million_samples", "joules_per_sample"))
    se.add_argument("--top", type=int, default=15, help="rows to print (0: all; default 15)")
    se.add_argument("--json", action="store_true", help="print every parameter as JSON records")
    se.set_defaults(func=_cmd_sensitivity)

    tr = sub.add_parser(
        "trace", help="one step as Chrome trace-event JSON (Perfetto, chrome://tracing)",
        description="Write one training step as a Chrome trace: a process per device (a sample when there are "
                    "many), threads for the compute stream, the communication stream and compute idle time.")
    _add_problem(tr)
    tr.add_argument("--out", required=True, help="trace JSON to write (never overwritten)")
    tr.add_argument("--devices", help="ranks to show, e.g. 0,7,63 (default: slowest, fastest, evenly spaced)")
    tr.add_argument("--max-devices", type=int, default=8, help="devices shown when sampling (default 8)")
    tr.set_defaults(func=_cmd_trace)

    pl = sub.add_parser(
        "plot", help="figures: breakdown, tradeoff, scaling, pareto, timeline",
        description="breakdown: stacked phases per system (--systems); tradeoff: step time vs scale-out NIC "
                    "bandwidth, integrated vs PCIe NIC, with and without offload engines (--system, --vary to "
                    "change); scaling: throughput and efficiency vs chips (--system, --chips, --mode); pareto: "
                    "throughput vs cost or power (--systems, --x usd|power); timeline: per-device Gantt chart "
                    "of one step (--system, --plan, --devices).")
    pl.add_argument("kind", choices=PLOT_KINDS)
    pl.add_argument("--model", required=True, help="model preset or TOML path")
    pl.add_argument("--systems", help="comma-separated systems (breakdown, pareto)")
    pl.add_argument("--system", help="one system (tradeoff, scaling: any size of the family, timeline)")
    pl.add_argument("--chip", help="replace the system's chip (tradeoff, timeline)")
    pl.add_argument("--plan", help="plan JSON (timeline); default: the greedy default plan")
    pl.add_argument("--vary", action="append", metavar="KNOB=VALUES", help="tradeoff knobs (default: "
                    + " ".join(DEFAULT_TRADEOFF) + ")")
    add_chips(pl, help="scaling: a list of chip counts, e.g. 16,64,256; tradeoff and timeline: " + CHIPS_HELP)
    pl.add_argument("--mode", default="both", choices=("strong", "weak", "both"), help="scaling mode (default both)")
    pl.add_argument("--x", choices=("usd", "power"), help="pareto: cost (usd, default) or power on the x axis")
    pl.add_argument("--devices", help="timeline: ranks to show")
    pl.add_argument("--max-devices", type=int, default=4, help="timeline: devices shown when sampling (default 4)")
    pl.add_argument("--out", required=True, help="image to write (PNG, SVG or PDF; never overwritten)")
    pl.set_defaults(func=_cmd_plot)
