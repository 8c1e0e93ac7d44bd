"""The `perfmodel` command line: evaluate and list (search, sweep, ... arrive with their issues)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .config import ConfigError, read_file


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")


def _cmd_evaluate(args) -> int:
    from . import default_plan, evaluate, load_model, load_plan, load_system
    from .report import format_breakdown, to_dict

    system = load_system(args.system, chip=args.chip)
    model = load_model(args.model)
    plan = load_plan(args.plan, system, model) if args.plan else default_plan(system, model)
    bd = evaluate(system, model, plan)
    if args.save_plan:
        plan.save(args.save_plan)
    if args.json:
        out = {"system": system.name, "model": model.name, "plan": plan.to_dict(), **to_dict(bd, args.per_device)}
        print(json.dumps(out, indent=2))
    else:
        src = args.plan or "default (greedy) plan"
        print(format_breakdown(bd, f"{model.name} on {system.name} ({system.num_chips} x {system.chip.name}), plan: {src}"))
    return 0


def _cmd_list(args) -> int:
    from .config import preset_names, preset_path
    from .hardware import system_families

    chips = [(n, read_file(preset_path("chips", n)).get("description", "")) for n in preset_names("chips")]
    models = [(n, read_file(preset_path("models", n)).get("description", "")) for n in preset_names("models")]
    systems = system_families()
    if args.json:
        print(json.dumps({
            "systems": [{"family": f, "sizes": s, "names": [f"{f}-{n}" for n in s], "description": d} for f, s, d in systems],
            "chips": [{"name": n, "description": d} for n, d in chips],
            "models": [{"name": n, "description": d} for n, d in models],
        }, indent=2))
        return 0
    print("systems (use <family>-<chips>, e.g. mtia300-64):")
    for f, s, d in systems:
        print(f"  {f + '-{' + ','.join(map(str, s)) + '}':<28} {d}")
    print("chips:")
    for n, d in chips:
        print(f"  {n:<28} {d}")
    print("models:")
    for n, d in models:
        print(f"  {n:<28} {d}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfmodel",
        description="Differentiable performance model of distributed training for ranking models. "
                    "Times in seconds, sizes in bytes, bandwidths in bytes/s unless a flag says otherwise.")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("evaluate", help="step time, breakdown, memory and cost of one plan",
                        description="Evaluate one training step of MODEL on SYSTEM under a plan "
                                    "(the greedy default plan unless --plan is given). Inputs are TOML "
                                    "(systems, chips, models) and JSON (plans). Results: times in seconds "
                                    "(the table prints ms / us), sizes in bytes, throughput in samples/s; "
                                    "every --json key carries its unit (step_s, memory_max_bytes).")
    ev.add_argument("--system", required=True, help="system preset <family>-<chips> (e.g. mtia300-64) or a system TOML path")
    ev.add_argument("--model", required=True, help="model preset (e.g. dlrm-dcnv2-mlperf) or a model TOML path")
    ev.add_argument("--plan", help="plan JSON (per-table sharding_type + ranks, TorchRec names); default: greedy plan")
    ev.add_argument("--chip", help="replace the system's chip by this chip preset or chip TOML (e.g. a calibrated one)")
    ev.add_argument("--save-plan", metavar="PATH", help="write the evaluated plan as JSON (never overwrites)")
    ev.add_argument("--per-device", action="store_true", help="with --json: include per-device arrays")
    _add_common(ev)
    ev.set_defaults(func=_cmd_evaluate)

    ls = sub.add_parser("list", help="the bundled systems, chips and models, one line each")
    _add_common(ls)
    ls.set_defaults(func=_cmd_list)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as err:
        print(f"perfmodel: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
