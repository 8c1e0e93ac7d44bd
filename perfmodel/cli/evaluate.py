"""`perfmodel evaluate`: step time, breakdown, memory and cost of one plan."""

from __future__ import annotations

import json

from . import io
from .args import add_chips, add_json, add_uncertainty, load_system_arg, uncertainty_of


def register(sub) -> None:
    ev = sub.add_parser("evaluate", help="step time, breakdown, memory and cost of one plan",
                        description="Evaluate one training step of MODEL on SYSTEM under a plan "
                                    "(the searched one unless --plan says greedy or a file). Inputs are TOML "
                                    "(systems, chips, models) and JSON (plans). Results: times in seconds "
                                    "(the table prints ms / us), sizes in bytes, throughput in samples/s; "
                                    "every --json key carries its unit (step_s, memory_max_bytes).")
    ev.add_argument("--system", required=True, help="system preset <family>-<chips> (e.g. mtia300-64) or a system TOML path")
    add_chips(ev)
    ev.add_argument("--model", required=True, help="model preset (e.g. dlrm-dcnv2-mlperf) or a model TOML path")
    ev.add_argument("--plan", help="search (the default: the plan searched for this system, as every study uses; "
                    "kept on disk for the next call), greedy, or a plan JSON (per-table sharding_type + ranks, "
                    "TorchRec names)")
    ev.add_argument("--iterations", type=int, help="with --plan search: rounds (default "
                    "perfmodel.analysis.STUDY_ITERATIONS, 300)")
    ev.add_argument("--seed", type=int, default=0, help="with --plan search: seed (default 0)")
    ev.add_argument("--chip", help="replace the system's chip by this chip preset or chip TOML (e.g. a calibrated one)")
    ev.add_argument("--constraints", metavar="FILE", help="per-table constraints to check the plan against (TOML/JSON; "
                    "the model file's [constraints.<table>] are checked too); each one the plan breaks is reported")
    io.add_output(ev, "--save-plan", io.PLAN, metavar="PATH", help="write the evaluated plan as JSON (never overwrites)")
    ev.add_argument("--per-device", action="store_true", help="with --json: include per-device arrays")
    ev.add_argument("--guard", metavar="FILE", help="also give the plan's value in a second cost model (per-shard "
                    "costs summed per device, as `search --guard` reads them, e.g. TorchRec's estimate) and its cap")
    add_uncertainty(ev, "the step, throughput, cost and energy")
    add_json(ev)
    ev.set_defaults(func=_cmd_evaluate)


def _cmd_evaluate(args) -> int:
    from .. import evaluate, load_model
    from ..report import format_breakdown, to_dict

    system = load_system_arg(args)
    model = load_model(args.model)
    drawn = uncertainty_of(args)           # a bad --uncertainty before any search
    guard = None
    if args.guard is not None:
        from ..search.guard import load_shard_costs
        guard = load_shard_costs(args.guard, system, model)
    plan, src = _evaluated_plan(args, system, model)
    from ..constraints import for_command
    from ..plan import plan_violations
    broken = plan_violations(plan, for_command(args.model, args.constraints), system, model)
    bd = evaluate(system, model, plan)
    if args.save_plan is not None:
        io.save_plan(plan, args.save_plan)
    value = guard.value(plan, system, model) if guard is not None else None
    met = guard is not None and guard.within(value)
    res = None
    if drawn is not None:
        from ..uncertainty.propagate import propagate
        res = propagate([system], [model], [plan], progress="uncertainty", **drawn)[0]
    if args.json:
        out = {"system": system.name, "model": model.name, "plan": plan.to_dict(), **to_dict(bd, args.per_device)}
        if guard is not None:
            out["guard"] = {"name": guard.name, "value_s": value, "cap_s": float(guard.cap), "met": met}
        out["constraint_violations"] = [{"field": f, "message": m} for f, m in broken]
        if res is not None:
            from ..uncertainty.report import to_dict as uncertainty_dict
            out["uncertainty"] = uncertainty_dict(res)
        print(json.dumps(out, indent=2))
    else:
        print(format_breakdown(bd, f"{model.name} on {system.name} ({system.num_chips} x {system.chip.name}), plan: {src}"))
        if guard is not None:
            from ..search.guard import guard_line
            print(guard_line(guard.name, args.guard, value, float(guard.cap), met))
        for f, m in broken:
            print(f"constraint broken: {f} {m}")
        if res is not None:
            from ..uncertainty.report import lines
            print()
            print("\n".join(lines(res)))
    return 0


def _evaluated_plan(args, system, model):
    """(plan, its label) of evaluate's --plan: "search" (the default: the plan every study searches for
    this hardware, kept on disk after the first time), "greedy", or a plan JSON."""
    from .. import default_plan, load_plan
    if args.plan == "greedy":
        return default_plan(system, model), "greedy"
    if args.plan not in (None, "search"):
        return load_plan(args.plan, system, model), args.plan
    from ..analysis.planning import planner, searched_plan
    make = planner("search", iterations=args.iterations, seed=args.seed)      # checks both
    plan, kept = searched_plan(make, system, model, progress=not args.json)
    return plan, make.label + (", kept from an earlier call" if kept else "")
