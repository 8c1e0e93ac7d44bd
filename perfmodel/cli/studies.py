"""The studies of `perfmodel` that answer with the plan each machine wants: sensitivity (elasticities
of the optimized step, with re-searched finite differences), compare (systems side by side, each
with its own plan, and the attribution of the gap between two of them) and uncertainty (what each
uncertain input does to an answer's spread, and the model's own error refitted)."""

from __future__ import annotations

import dataclasses
import json
import math
import sys

from ..config import ConfigError
from .args import (add_planning, add_problem, add_uncertainty, executors_of, load_system_arg, planner_of,
                   uncertainty_of)


def _top(args) -> int | None:
    """--top: the rows to print, None for all (0); refused below 0, where a slice would drop rows from the end."""
    if args.top < 0:
        raise ConfigError("", "--top", f"must be 0 (every row) or a number of rows to print, got {args.top}")
    return args.top or None


# ------------------------------------------------------------------------------------------ sensitivity

def _cmd_sensitivity(args) -> int:
    from .. import load_model
    from ..analysis.sensitivity import format_sensitivity, sensitivity
    from ..analysis.table import records

    if args.replan < 0:
        raise ConfigError("", "--replan", f"must be an integer >= 0 (parameters to re-search), got {args.replan}")
    top = _top(args)
    system = load_system_arg(args)
    model = load_model(args.model)
    make = planner_of(args)
    where = executors_of(args)           # where --replan's points are searched
    table = sensitivity(system, model, make, metric=args.metric, replan=args.replan, h=args.h, **where)
    if args.json:
        print(json.dumps({"system": system.name, "model": model.name, "metric": args.metric, "plan": make.label,
                          "h": args.h if args.replan else None, "rows": records(table)}, indent=1))
        return 0
    title = f"{model.name} on {system.name}, plan: {make.label}: elasticities of {args.metric}"
    print(format_sensitivity(table, args.metric, top, title))
    return 0


# ------------------------------------------------------------------------------------------ compare

COMPARE_COLUMNS = (  # (header, SI column, scale to the unit shown, format)
    ("step ms", "step_s", 1e3, "{:.3f}"), ("M samples/s", "samples_per_s", 1e-6, "{:.2f}"),
    ("exposed comm ms", "exposed_comm_s", 1e3, "{:.3f}"), ("MFU %", "mfu", 100.0, "{:.2f}"),
    ("$ / M samples", "usd_per_million_samples", 1.0, "{:.4f}"), ("mJ / sample", "joules_per_sample", 1e3, "{:.3f}"),
    ("power kW", "power_W", 1e-3, "{:.1f}"))


def _cmd_compare(args) -> int:
    from .. import evaluate, load_model, load_system
    from ..analysis import planning
    from ..analysis.attribution import attribute
    from ..analysis.readout import si_column
    from ..analysis.scaling import compare, distinct
    from ..analysis.table import columns

    names = [s.strip() for s in args.systems.split(",") if s.strip()]
    if not names:
        raise ConfigError("", "--systems", f"{args.systems!r} lists no system; give names, e.g. mtia300-64,h100-64")
    if args.attribute and len(names) != 2:
        raise ConfigError("", "--attribute", f"attributes the gap between two systems; --systems lists {len(names)}")
    model = load_model(args.model)
    make = planner_of(args)
    where = executors_of(args)
    drawn = uncertainty_of(args)           # a bad --uncertainty before any search
    systems = distinct([load_system(n) for n in names], "--systems")
    plans = dict(zip((s.name for s in systems), planning.plans(make, [(s, model) for s in systems], **where)))
    table = compare(systems, model, plan=make, breakdowns={s.name: evaluate(s, model, plans[s.name]) for s in systems})
    c = columns(table)
    att = None
    if args.attribute:   # the slower system gets the faster one's features
        steps = dict(zip(c["system"], si_column(table, "step_s")))
        slow, fast = sorted(systems, key=lambda s: -steps[s.name])
        att = attribute(slow, fast, model, plan=make, system_plan=plans[slow.name], reference_plan=plans[fast.name],
                        **where)        # the two systems' plans are the ones just made
    res = None
    if drawn is not None:
        from ..analysis.attribution import attribution_draws
        from ..uncertainty.propagate import propagate
        res = propagate(systems, [model] * len(systems), [plans[s.name] for s in systems], progress="uncertainty",
                        **drawn)
        if att is not None:
            att = dataclasses.replace(att, uncertainty=attribution_draws(att, drawn["draws"], drawn["seed"],
                                                                          drawn["model_error"]))
    if args.json:
        out = {"model": model.name, "plan": make.label,
               "systems": [{k: (v[i].item() if hasattr(v[i], "item") else v[i]) for k, v in c.items()}
                           for i in range(len(names))],
               "plans": {k: p.to_dict() for k, p in plans.items()}}
        if att is not None:
            out["attribution"] = att.to_dict()
        if res is not None:
            from ..uncertainty.report import compare_dict
            out["uncertainty"] = compare_dict([s.name for s in systems], res)
        print(json.dumps(out, indent=1))
        return 0
    title = f"{model.name}, each system with its own plan: {make.label}"
    lines = [title, "=" * len(title)]
    width = max(len("system"), *(len(n) for n in c["system"]))
    lines.append(f"{'system':<{width}} {'chips':>5} {'replicas':>8}  "
                 + "  ".join(f"{h:>{max(len(h), 8)}}" for h, *_ in COMPARE_COLUMNS) + "  fits")
    for i in range(len(c["system"])):
        cells = []
        for h, col, scale, fmt in COMPARE_COLUMNS:
            cells.append(f"{fmt.format(float(si_column(table, col)[i]) * scale):>{max(len(h), 8)}}")
        lines.append(f"{c['system'][i]:<{width}} {int(c['chips'][i]):>5} {int(c['replicas'][i]):>8}  " + "  ".join(cells)
                     + f"  {'yes' if c['feasible'][i] else 'NO'}")
    print("\n".join(lines))
    if res is not None:
        from ..uncertainty.report import compare_lines
        print()
        print("\n".join(compare_lines([s.name for s in systems], res)))
    if att is not None:
        print()
        print(att.format())
    return 0


# ------------------------------------------------------------------------------------------ uncertainty

def _cmd_uncertainty(args) -> int:
    from ..uncertainty import modelerror as ME
    if args.fit_model_error:
        from ..files import check_output
        from ..uncertainty.decompose import check_base
        if args.out is None:
            raise ConfigError("", "--out", "is required with --fit-model-error: the new model-error file to write "
                              "(the package's own model_error.json is never overwritten; data/measurements/README.md "
                              "says how a developer replaces it)")
        check_output(args.out, (".json",), "model-error file")
        n = check_base(args.draws, "--draws")
        log = (lambda m: None) if args.json or args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
        rows = ME.validation_rows(args.results)
        log(f"model error: the inputs' spread at the {len(rows)} validation runs' own plans, {n} draws each")
        spreads = ME.row_spreads(rows, n, args.uncertainty_seed, log=log)
        me = ME.fit(spreads)
        inside = ME.coverage(spreads, me, args.uncertainty_seed)
        loso = ME.loso_coverage(spreads, args.uncertainty_seed)
        logo = ME.logo_coverage(spreads, args.uncertainty_seed)
        path = ME.write(me, spreads, args.out)
        if args.json:
            print(json.dumps({**me.as_dict(), "file": str(path), "rows_judged": len(inside), "inside_80": sum(inside),
                              "inside_80_leave_one_system_out": sum(loso), "rows_leave_one_system_out": len(loso),
                              "inside_80_leave_one_generation_out": sum(logo), "rows_leave_one_generation_out": len(logo)},
                             indent=1))
        else:
            fams = ", ".join(f"{f} {100 * math.expm1(m):+.1f} % ({k} runs)" for f, m, k in me.families)
            print(f"wrote {path}: bias by family {fams}; spread within a family {100 * me.residual_sigma:.1f} % (log), "
                  f"the inputs' {100 * me.input_sigma:.1f} %, the model's own {100 * me.sigma:.1f} %; on a family outside "
                  f"these {100 * me.transfer_sigma:.1f} % about no bias. The measured step inside the 80 % interval: "
                  f"{sum(inside)} of {len(inside)} runs; {sum(loso)} of {len(loso)} with the error and the parameters "
                  f"fitted on the other systems' runs; {sum(logo)} of {len(logo)} on the other generations' runs")
        return 0
    if args.system is None or args.model is None:
        raise ConfigError("", "--system" if args.system is None else "--model",
                          "is required (or --fit-model-error, which takes neither)")
    from .. import load_model
    from ..analysis import planning
    from ..uncertainty.decompose import check_base, format_sources, sources
    from ..uncertainty.inputs import inputs_of
    n = check_base(args.draws, "--draws")
    top = _top(args)
    system = load_system_arg(args)
    model = load_model(args.model)
    if args.inputs:
        ins = inputs_of(system, model)
        if args.json:
            print(json.dumps([dict(i.__dict__) for i in ins], indent=1))
            return 0
        w = max([len("input"), *(len(i.name) for i in ins)])
        print(f"{'input':<{w}}  {'value':>10}  {'range':<26} provenance")
        for i in ins:
            v = "x1" if i.factor else f"{i.value:.4g}"
            print(f"{i.name:<{w}}  {v:>10}  {f'{i.lo:.4g} .. {i.hi:.4g} {i.unit}'.strip():<26} {i.provenance}")
        return 0
    make = planner_of(args)
    plan = planning.plans(make, [(system, model)])[0]
    rows = sources(system, model, plan, args.figure, n, args.uncertainty_seed, model_error=not args.no_model_error,
                   progress=None if args.json else "uncertainty")
    if args.json:
        print(json.dumps({"system": system.name, "model": model.name, "plan": make.label, "figure": args.figure,
                          "draws": n, "seed": args.uncertainty_seed, "sources": [r.to_dict() for r in rows]}, indent=1))
        return 0
    title = (f"{model.name} on {system.name}, plan: {make.label}: what the spread of {args.figure} comes from "
             f"({n} base draws)")
    print(format_sources(rows, title, top))
    return 0


# ------------------------------------------------------------------------------------------ parser

def register(sub) -> None:
    """Add sensitivity and compare to the `perfmodel` subparsers."""
    se = sub.add_parser(
        "sensitivity", help="elasticities of the optimized step time (or cost) w.r.t. every hardware parameter",
        description="d log(metric) / d log(parameter) for every hardware parameter of SYSTEM (one jax.grad at the "
                    "searched plan by default), ranked by size: +1 % in the parameter changes the metric by "
                    "elasticity %. At a fixed optimal plan this is the optimized step's elasticity for continuous "
                    "plan choices (envelope theorem); discrete ones (sharding, placement) make it the slope of the "
                    "plan's branch. --replan K re-searches at x(1 +- h) for the top K parameters with a knob: where "
                    "the two differ, a plan switch is near and the re-searched figure is the one to trust.")
    add_problem(se, executors=True)
    se.add_argument("--metric", default="step_s", choices=("step_s", "usd_per_million_samples", "joules_per_sample"))
    se.add_argument("--replan", type=int, default=0, metavar="K",
                    help="re-searched central differences for the top K parameters with a sweep knob (2K searches)")
    se.add_argument("--h", type=float, default=0.1, help="relative step of --replan's differences (default 0.1)")
    se.add_argument("--top", type=int, default=15, help="rows to print (0: all; default 15)")
    se.add_argument("--json", action="store_true", help="print every parameter as JSON records")
    se.set_defaults(func=_cmd_sensitivity)

    co = sub.add_parser(
        "compare", help="systems side by side, each with its own plan; --attribute splits the gap of two",
        description="MODEL on each of SYSTEMS with the plan that system wants (a fixed-round search by default): "
                    "step time, throughput, exposed communication, MFU, cost, energy and power. --attribute (two "
                    "systems): the slower one gets the faster one's NIC attachment, message engines and bandwidth "
                    "split, re-planned at each of the 2^k on/off combinations, and each factor's Shapley share of "
                    "the gap is printed (perfmodel/analysis/attribution.py).")
    co.add_argument("--systems", required=True, help="comma-separated systems, e.g. mtia300-64,h100-64")
    co.add_argument("--model", required=True, help="model preset or TOML path")
    add_planning(co, executors=True)
    co.add_argument("--attribute", action="store_true", help="attribute the gap between the two systems")
    add_uncertainty(co, "each system's step, the step ratio of the first system to each other, the probability that "
                        "the first is faster, and with --attribute each share's interval")
    co.add_argument("--json", action="store_true", help="print the table, the plans (and the attribution) as JSON")
    co.set_defaults(func=_cmd_compare)

    un = sub.add_parser(
        "uncertainty", help="what to measure next: each uncertain input's share of a figure's spread",
        description="A variance decomposition of log(FIGURE) of MODEL on SYSTEM at its plan (Sobol' indices, "
                    "scipy.stats.sobol_indices): every uncertain number of the system's files (its stated range, else "
                    "one by its provenance: docs/configuration.md) and the model's own error from validation, ranked by "
                    "their share. --inputs lists the inputs and their ranges; --fit-model-error refits the model's own "
                    "error from the step validation's results into a new file (--out).")
    add_problem(un, required=False)
    un.add_argument("--figure", default="step_s", choices=("step_s", "samples_per_s", "usd_per_million_samples",
                                                           "joules_per_sample"), help="the figure (default step_s)")
    un.add_argument("--draws", type=int, default=256, help="base draws, a power of two (default 256; the decomposition "
                                                            "evaluates draws x (inputs + 2) points)")
    un.add_argument("--uncertainty-seed", type=int, default=0, metavar="S", help="seed of the draws (default 0)")
    un.add_argument("--no-model-error", action="store_true", help="the inputs alone, without the model's own error")
    un.add_argument("--top", type=int, default=15, help="rows to print (0: all; default 15)")
    un.add_argument("--inputs", action="store_true", help="list the uncertain inputs and their ranges, and stop")
    un.add_argument("--fit-model-error", action="store_true", help="refit the model's own error from the step "
                    "validation (several seconds per run) into the new file --out names")
    un.add_argument("--out", default=None, metavar="FILE", help="with --fit-model-error: the new .json file to write "
                    "(never an existing one)")
    un.add_argument("--results", default=None, metavar="FILE", help="with --fit-model-error: the step validation's "
                    "results (default data/measurements/steps/results.json)")
    un.add_argument("--json", action="store_true", help="print the rows as JSON")
    un.set_defaults(func=_cmd_uncertainty)
