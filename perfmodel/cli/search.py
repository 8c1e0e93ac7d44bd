"""`perfmodel search`: find a plan, compare methods, co-design a hardware knob."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np

from ..config import ConfigError
from ..schema import GROUP_LAYOUTS
from ..constraints import for_command
from ..search.api import ITERATIONS, ROUND_WORK, default_iterations
from ..search.guard import guard_line
from . import io
from .args import add_chips, load_system_arg, maybe_empty, replica_arg, sync_every_arg, system_flags


def register(sub) -> None:
    p = sub.add_parser(
        "search", help="find the fastest memory-feasible plan (gradient search or a baseline)",
        description="Search the plan space (per-table sharding and ranks, dense parallelism, collective "
                    "algorithms, buckets, chunks, pipelining, offload) for the fastest memory-feasible plan. "
                    "Times in seconds (the table prints ms), throughput in samples/s, budget in seconds of "
                    "wall time, compile included.")
    p.add_argument("--system", required=True, help="system preset <family>-<chips> (e.g. mtia300-64) or a TOML path")
    add_chips(p)
    p.add_argument("--model", required=True, help="model preset (e.g. dlrm-dcnv2-mlperf) or a TOML path")
    p.add_argument("--method", default="gradient", help="gradient (default), greedy, random, evolutionary, exact, or hugectr "
                   "(HugeCTR's own planner, as MLPerf's runs used it: hugectr = hugectr:auto:7:0.008; "
                   "hugectr:PLAN:RATIO:THRESHOLD_GB with PLAN auto, hier_auto, round_robin or uniform)")
    p.add_argument("--seed", type=int, default=0, help="random seed (the same seed and --iterations give the same "
                   "plan, unless --budget-s cut the search)")
    p.add_argument("--iterations", type=int, default=None, help="rounds per method (a descent's round, a relaxed "
                   "batch's Adam steps, a generation): the work, bounded so that the plan does not depend on the machine "
                   f"(default: {ROUND_WORK:.0e} / (tables x devices), within {ITERATIONS[0]}-{ITERATIONS[1]})")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--budget-s", type=float, default=None, help="wall-clock stop per method, seconds (default: "
                        "none, the search ends at its iterations and gives the same plan on any machine): a search it "
                        "cuts says so; read between rounds, and a round that compiles (some 10 s in a cold process) runs "
                        "to its end")
    budget.add_argument("--until-converged", action="store_true",
                        help="no budget at all: the gradient search runs every phase to its end; --compare's random and "
                        "evolutionary get the wall time it took")
    p.add_argument("--compare", default="", type=maybe_empty, help="comma-separated baselines to run with the same budget, "
                   "e.g. greedy,random,evolutionary")
    p.add_argument("--hold", default=None, metavar="KEY=VALUE,...", help="plan settings your framework fixes, held "
                   "from the search's first round: dense, a2a_precision, grad_precision, offload, pipeline (on/off), "
                   "grad_buckets, overlap_chunks, all_to_all, all_reduce, reduce_scatter, all_gather (e.g. "
                   "--hold dense=replicated,overlap_chunks=1,pipeline=off); a constraints file's hold joins them")
    p.add_argument("--start", default=None, metavar="PLAN.json", help="a plan of your own that the search starts from "
                   "beside the planners' (greedy, HugeCTR's auto and hier_auto, round_robin); the plan found is no "
                   "worse than any of them")
    p.add_argument("--precisions", default="fp32", help="precisions the all-to-all and gradient sync may use, "
                   "e.g. fp32,bf16 (lower precision changes the numerics; default fp32)")
    p.add_argument("--co-design", default=None, help="search a hardware knob with the plan: nic_split (share of "
                   "NIC bandwidth on scale-up) or scale_out_bw (GB/s per chip, priced)")
    p.add_argument("--guard", metavar="FILE", help="a second cost model as a constraint (JSON: per-shard costs per table "
                   "and sharding type, and a cap on the busiest device's sum, e.g. TorchRec's estimate; see "
                   "perfmodel/search/guard.py): the gradient search returns the fastest plan within the cap")
    p.add_argument("--constraints", metavar="FILE", help="per-table constraints (TOML/JSON of [<table>] sections: "
                   "sharding_types, compute_kernels, cache_load_factor, min_partition, max_cw_shards, ranks); they "
                   "replace the model file's own [constraints.<table>] table by table")
    p.add_argument("--replicas", default=None, help="2D sparse parallelism: the chips as R replicas of sharding "
                   "groups of chips / R (tables sharded in a group, replicated across groups, the replicas "
                   "synchronized): 1 (every table over every chip; the default unless the constraints say "
                   "replicas), a count, a comma-separated list, or auto (every count the system's domains allow; "
                   "the best of each is printed)")
    p.add_argument("--group-layout", default="strided", choices=GROUP_LAYOUTS, help="strided (default, TorchRec's: "
                   "a shard's replicas on neighbouring ranks, synchronized on the innermost links) or contiguous "
                   "(a group on consecutive ranks, its all-to-alls on the innermost links)")
    p.add_argument("--sync-every", type=int, default=None, help="the most steps between the replicas' "
                   "synchronizations (default 1, or the constraints' sync_every: the touched rows' gradients every "
                   "step; k > 1 also prices the weights and optimizer state every k steps and keeps the faster)")
    p.add_argument("--objective", default="nominal", help="what the plan minimizes: nominal (default: the step at "
                   "the files' values) or pNN, a percentile of the step over --draws draws of the files' uncertain "
                   "inputs (p90: the plan that stays fast when the inputs are off; NN 1-99); prints the nominal-best "
                   "plan's p50 / p90 beside the robust plan's at 1,000 other draws, and the gap")
    p.add_argument("--draws", type=int, default=None, metavar="K", help="with --objective pNN: the draws every "
                   "candidate is priced at (default 64, 2-4,096)")
    p.add_argument("--uncertainty-seed", type=int, default=None, metavar="S", help="with --objective pNN: the seed "
                   "of the draws (default 0; the check's draws take the next seed)")
    p.add_argument("--chip", help="replace the system's chip by this chip preset or TOML")
    io.add_output(p, "--out", io.PLAN, help="write the best plan as JSON (never overwrites); `evaluate --plan` reads it")
    p.add_argument("--format", choices=("perfmodel", "torchrec"), default="perfmodel",
                   help="--out's form: perfmodel's plan (default), or TorchRec's sharding plan (every table's "
                   "ParameterSharding with its shards; pm.load_torchrec_plan reads it): the search then makes only "
                   "shapes TorchRec can run (no row-wise over a subset of the ranks)")
    p.add_argument("--torchrec-module", default=None, metavar="PATH", help="with --format torchrec: the "
                   "embedding module's path in the model (default sparse_arch.embedding_bag_collection)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.set_defaults(func=_cmd_search)


def _cmd_search(args) -> int:
    from .. import load_model
    from ..report import format_per_rank, per_rank, summary
    from ..search.api import search
    from ..plan import load_plan, parse_hold
    from ..search.methods import METHODS, is_method, spec

    if args.torchrec_module is not None and args.format != "torchrec":
        raise ConfigError("", "--torchrec-module", "is for --format torchrec")
    q = _objective_of(args)           # bad flags before any file is read
    system = load_system_arg(args)
    model = load_model(args.model)
    start = load_plan(args.start, system, model) if args.start else None
    constraints = for_command(args.model, args.constraints)
    methods = [args.method] + [m for m in args.compare.split(",") if m and m != args.method]
    for m in methods:
        if not is_method(m):
            raise ConfigError("", "method", f"is {m!r}; allowed: {', '.join(METHODS)} (or hugectr:PLAN:RATIO:THRESHOLD_GB)")
    hold = parse_hold(args.hold, "", "--hold")
    if args.until_converged and spec(args.method).samples:
        raise ConfigError("", "--until-converged", f"{args.method} samples until its budget is spent and never "
                          "converges: give --budget-s or --iterations (--until-converged is for gradient, greedy and exact)")
    if args.until_converged and args.iterations is not None:
        raise ConfigError("", "--until-converged", "takes no --iterations (it runs every phase to its end)")
    if args.iterations is not None and args.iterations < 1:
        raise ConfigError("", "--iterations", f"must be an integer >= 1 (rounds), got {args.iterations}")
    iterations = None if args.until_converged else args.iterations if args.iterations is not None else \
        default_iterations(system, model)
    objective, search_iterations = {}, iterations
    if q is not None:
        objective = dict(objective=args.objective, draws=args.draws, uncertainty_seed=args.uncertainty_seed)
        if args.iterations is None and not args.until_converged:
            search_iterations = "auto"         # the same rounds for the nominal pass; the objective's its own
    precisions = tuple(p for p in args.precisions.split(",") if p)
    replicas = None if args.replicas is None else replica_arg(args.replicas)
    guard = None
    if args.guard:
        from ..search.guard import load_shard_costs
        if not spec(args.method).guarded or args.co_design:
            raise ConfigError("", "--guard", f"is for --method gradient without --co-design (got --method {args.method}"
                              f"{' --co-design ' + args.co_design if args.co_design else ''})")
        guard = load_shard_costs(args.guard, system, model)
    results, budgets = [], []
    for m in methods:
        budget = args.budget_s
        if args.until_converged:      # the baselines that sample until their budget is spent: the first one's time
            budget = results[0].wall_s if results and spec(m).samples else None
        budgets.append(budget)
        results.append(search(system, model, m, seed=args.seed, budget_s=budget,
                              iterations=search_iterations, **objective, precisions=precisions,
                              co_design=args.co_design if m == args.method else None,
                              guard=guard if m == args.method else None, constraints=constraints,
                              progress=not args.no_progress and not args.json, replicas=replicas,
                              group_layout=args.group_layout, sync_every=sync_every_arg(args), hold=hold,
                              start=start if spec(m).scores or spec(m).exact else None,
                              shapes="torchrec" if args.format == "torchrec" else "all"))
    best = min(results, key=lambda r: (not r.feasible, r.step_s))
    chosen = results[0]
    if args.out is not None and args.format == "torchrec":
        from ..interop.torchrec_plan import DEFAULT_MODULE, torchrec_plan
        io.save_torchrec_plan(torchrec_plan(chosen.plan, system, model,
                                         module_path=args.torchrec_module or DEFAULT_MODULE), args.out)
    elif args.out is not None:
        io.save_plan(chosen.plan, args.out)
    if args.json:
        out = {"system": system.name, "model": model.name, "results": [{
            "method": r.method, "step_s": r.step_s, "samples_per_s": r.samples_per_s, "feasible": r.feasible,
            "memory_headroom": r.memory_headroom, "gap_to_best": r.step_s / best.step_s - 1.0, "wall_s": r.wall_s,
            "budget_s": b, "iterations": r.iterations, "stopped": r.stopped, "converged": r.converged,
            "evaluations": r.evaluations,
            "notes": {k: v for k, v in r.notes.items() if k != "rounded_scores_s"}} for r, b in zip(results, budgets)],
            "plan": chosen.plan.to_dict(), "summary": summary(chosen.breakdown),
            "ranks": per_rank(chosen.breakdown, chosen.plan, model)}
        if q is not None:
            out.update(objective_json(chosen))
        print(json.dumps(out, indent=2, default=float))
        return 0
    budget = (f"no budget, {args.method} until it converged" + (
        f" ({results[0].wall_s:.1f} s; random and evolutionary given as long)" if len(results) > 1 else "")
        if args.until_converged else f"{iterations} iterations per method, no wall-clock limit" if args.budget_s is None
        else f"{iterations} iterations or {args.budget_s:g} s per method")
    print(f"plan search: {model.name} on {system.name} ({system.num_chips} x {system.chip.name}), "
          f"seed {args.seed}, {budget}")
    if constraints:
        print(f"constraints on {len(constraints.tables)} tables ({constraints.source}): every plan keeps them")
    if hold:
        print(f"held settings: {hold} (every plan scored keeps them)")
    # "found at": when the method first held its final plan (the last entry of its anytime profile): a
    # result found early in the budget would not gain from a larger one
    print(f"{'method':<14}{'step time':>12}{'samples/s':>14}{'HBM headroom':>14}{'gap to best':>13}{'wall':>9}{'found at':>10}")
    for r in results:
        progress = r.notes.get("progress")
        found = f"{progress[-1][0]:>8.1f} s" if progress else f"{'-':>10}"
        print(f"{r.method:<14}{r.step_s * 1e3:>9.3f} ms{r.samples_per_s / 1e6:>11.3f} M {100 * r.memory_headroom:>12.1f} %"
              f"{100 * (r.step_s / best.step_s - 1):>12.2f} %{r.wall_s:>7.1f} s{found}" + ("" if r.feasible else "  INFEASIBLE"))
    if "kicks" in chosen.notes and "phases" in chosen.notes:       # the gradient method's phases
        print(search_status(chosen))
    for r in results:
        line = starts_line(r)
        if line:
            print(line)
    if "replicas" in chosen.notes:
        print(replicas_table(chosen.notes["replicas"], system.num_chips))
    if "guard" in chosen.notes:
        g = chosen.notes["guard"]
        print(guard_line(g["name"], args.guard, g["value_s"], g["cap_s"], g["met"])
              + ("" if g["met"] else " (no plan within the cap was found)")
              + (f"; {', '.join(r.method for r in results[1:])} searched without it" if len(results) > 1 else ""))
    print()
    print(describe_plan(chosen.plan, model))
    print(f"\nper rank ({chosen.method}'s plan):")
    print(format_per_rank(per_rank(chosen.breakdown, chosen.plan, model)))
    if q is not None:
        from ..uncertainty.robust import lines
        print()
        print("\n".join(lines(chosen.notes["objective"])))
    cd = chosen.notes.get("co_design")
    if cd:
        unit = cd["unit"]
        # the metric in the unit the tables use: step time in ms, cost in $ per million samples
        scale, metric = (1e3, "step ms") if cd["metric"] == "step_s" else (1.0, "$ per M samples")
        print(f"\nco-design {cd['knob']} ({unit}): preset {cd['preset']:.4g} -> chosen {cd['chosen']:.4g}; "
              f"{metric} {scale * cd['objective_at_preset']:.4g} -> {scale * cd['objective_at_chosen']:.4g} "
              f"({100 * cd['improvement']:.1f} % better; the knob alone, the preset's plan kept: "
              f"{100 * cd['improvement_plan_fixed']:.1f} %); at the choice, d({metric}) / d({cd['knob']}) = "
              f"{scale * cd['d_objective_d_knob']:.3g} per unit of the knob ({unit})")
        if len(results) > 1:
            print(f"(the table's {chosen.method} row is at the chosen value; "
                  f"{', '.join(r.method for r in results[1:])} at the preset's)")
    if args.out is not None and args.format == "torchrec":
        print(f"\nTorchRec sharding plan written to {args.out} (pm.load_torchrec_plan({args.out!r}) gives its ShardingPlan)")
    elif args.out is not None:
        print(f"\nplan written to {args.out} (perfmodel evaluate {system_flags(args)} --model {args.model} --plan {args.out})")
    return 0


def _objective_of(args) -> float | None:
    """--objective's quantile (None: nominal), with --draws and --uncertainty-seed checked against it."""
    from ..uncertainty.propagate import check_seed
    from ..uncertainty.robust import check_objective_draws, parse_objective
    q = parse_objective(args.objective, "--objective")
    if q is None:
        for flag, v in (("--draws", args.draws), ("--uncertainty-seed", args.uncertainty_seed)):
            if v is not None:
                raise ConfigError("", flag, "is for --objective pNN (a percentile of the step over draws)")
        return None
    if args.draws is not None:
        check_objective_draws(args.draws, "--draws")
    if args.uncertainty_seed is not None:
        check_seed(args.uncertainty_seed, "--uncertainty-seed")
    from ..search.api import OBJECTIVE_METHODS
    if args.compare:
        raise ConfigError("", "--compare", f"takes --objective nominal only (the table compares nominal steps); "
                          f"--objective {args.objective} searches one method")
    if args.method not in OBJECTIVE_METHODS:
        raise ConfigError("", "--objective", f"{args.objective} is for the methods that score candidate plans "
                          f"({', '.join(OBJECTIVE_METHODS)}); --method {args.method} builds its plan by its own rule")
    if args.co_design:
        raise ConfigError("", "--objective", f"{args.objective} is not searched with --co-design (co-design "
                          "searches the nominal step): give one or the other")
    if args.replicas not in (None, "1"):
        raise ConfigError("", "--objective", f"{args.objective} is searched on 1D plans: --replicas "
                          f"{args.replicas} (2D plans) takes --objective nominal")
    return q


def objective_json(r) -> dict:
    """--json's keys of a search at an objective other than nominal: the objective, both plans' p10 /
    p50 / p90 (and the objective's quantile) at the check's draws, the gap, and how it was searched."""
    info = r.notes["objective"]
    ck = info["check"]
    return {"objective": info["objective"], "robust": ck["robust"], "nominal_best": ck["nominal_best"],
            "p90_gap_s": ck["p90_gap_s"], "p90_gap_pct": ck["p90_gap_pct"],
            "objective_gap_s": ck["objective_gap_s"], "objective_gap_pct": ck["objective_gap_pct"],
            "objective_search": {"draws": info["draws"], "seed": info["seed"], "inputs": info["inputs"],
                                 "iterations": info["iterations"], "robust_s": info["found_s"],
                                 "nominal_best_s": info["nominal_best_s"], "kept": info["kept"],
                                 "check_draws": ck["draws"], "check_seed": ck["seed"], "same_plan": ck["same_plan"],
                                 "nominal_best_plan": r.nominal.plan.to_dict() if r.nominal is not None else None}}


def replicas_table(rows: list[dict], chips: int) -> str:
    """The best step of each replica count a search tried (2D plans), the chosen one marked."""
    best = min((r for r in rows if r["feasible"]), key=lambda r: r["step_s"], default=None)
    lines = ["replica counts (2D sparse parallelism; screened counts priced at their greedy plan):",
             f"  {'replicas':>8} {'group':>7} {'step ms':>10} {'sync every':>11}  how"]
    for r in rows:
        mark = "  <- chosen" if r is best else ""
        how = f"{r['method']} search" if r["searched"] else "greedy screen"
        lines.append(f"  {r['replicas']:>8} {chips // r['replicas']:>7} {r['step_s'] * 1e3:>10.3f} "
                     f"{r['sync_every']:>11}  {how}{'' if r['feasible'] else ', INFEASIBLE'}{mark}")
    return "\n".join(lines)


def starts_line(r) -> str | None:
    """What the search started from and what beat what: each start's step, the best start, and the
    search's gain over it with the parts of the step that moved (or that the best start was kept)."""
    from ..search.result import format_gain
    info = r.notes.get("starts")
    if not info:
        return None
    scores = ", ".join(f"{name} {v * 1e3:.3f} ms" if v is not None and v < 1e5 else f"{name} infeasible"
                       for name, v in info["scores_s"].items())
    line = f"{r.method} started from: {scores}"
    if info["kept"] != "search":
        return line + f"\n  the search found nothing faster than {info['kept']}, which it returns"
    if "gain" in info:
        return line + "\n  " + format_gain(info["best"], info["gain"])
    return line


def search_status(r) -> str:
    """One line on how a gradient search ended (by itself, at its iterations, or cut by its budget:
    only then may the same seed give another plan) and where its rounds and seconds went."""
    how = {"done": "finished every phase", "iterations": "used its iterations",
           "budget_s": "was cut by its budget"}[r.stopped]
    phases = ", ".join(f"{ph['name']} {ph['rounds']} rounds {ph['seconds']:.1f} s" for ph in r.notes["phases"])
    n = r.notes
    line = (f"gradient search {how} in {r.iterations} rounds ({phases}; {n.get('relaxed_batches', 0)} relaxed "
            f"batches, {n.get('kicks', 0)} kicks).")
    if r.stopped == "budget_s":
        # a cut search depends on the machine's speed: say how to get the plan every machine gives
        line += ("\nIt stopped before its rounds ended, so another machine or run may give another plan: "
                 "--until-converged runs it to its end (the same plan on any machine), or give a larger --budget-s.")
    return line


def describe_plan(plan, model, max_rows: int = 12) -> str:
    """Sharding types (count, rows, lookups), the heaviest tables' placements, and the settings."""
    tb = model.tables
    rows = np.asarray(tb.rows)
    pool = np.asarray(tb.pooling)
    lines = ["chosen plan:"]
    kinds = Counter(t.sharding_type for t in plan.tables.values())
    for st, n in kinds.most_common():
        idx = [i for i, name in enumerate(tb.names) if plan.tables[name].sharding_type == st]
        lines.append(f"  {st:<15} {n:>5} tables  {rows[idx].sum() / 1e6:>10.1f} M rows  "
                     f"{pool[idx].sum():>8.1f} lookups/sample")
    order = np.argsort(-(rows * pool))[:max_rows]
    lines.append("  heaviest tables (rows x pooling):")
    for i in order:
        t = plan.tables[tb.names[i]]
        ranks = t.ranks if len(t.ranks) <= 4 else f"{t.ranks[0]}..{t.ranks[-1]} ({len(t.ranks)})"
        cache = "" if t.cache_ratio >= 1 else f"  host DRAM, HBM cache {t.cache_ratio:.2f}"
        lines.append(f"    {tb.names[i]:<16} {rows[i]:>12,.0f} rows  pool {pool[i]:>6.1f}  {t.sharding_type:<15} ranks {ranks}{cache}")
    a = plan.algorithms
    lines.append(f"  dense: {plan.dense}; all-to-all {a['all_to_all']}, all-reduce {a['all_reduce']}, "
                 f"reduce-scatter {a['reduce_scatter']}, all-gather {a['all_gather']}")
    lines.append(f"  precision: all-to-all {plan.a2a_precision}, gradients {plan.grad_precision}; "
                 f"collectives on {'offload engines' if plan.offload else 'compute cores'}")
    lines.append(f"  overlap: sparse-dist pipeline {'on' if plan.pipeline else 'off'}, {plan.grad_buckets} gradient "
                 f"buckets, {plan.overlap_chunks} chunk(s)")
    if plan.replicas > 1:
        sync = "the touched rows' gradients every step" if plan.sync_every == 1 else \
            f"weights and optimizer state every {plan.sync_every} steps"
        lines.append(f"  2D: {plan.replicas} replicas of {plan.group_layout} sharding groups (the ranks above are a "
                     f"group's); replicas sync {sync}")
    return "\n".join(lines)
