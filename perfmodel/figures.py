"""The README's figures, from the presets in this repo and searched plans, by one command:

    python -m perfmodel.figures docs/img                 # all (make figures)
    python -m perfmodel.figures docs/img --only tradeoff

  breakdown.png    dlrm-dcnv2-mlperf on mtia300-64, h100-64, h200-64: where the step goes
  attribution.png  the h100-64 vs mtia300-64 gap: integrated NIC, message engines, bandwidth split
                   (Shapley shares, every combination re-searched; analysis.attribution)
  tradeoff.png     step time vs scale-out NIC bandwidth: integrated vs PCIe NIC, engines vs
                   core-driven, on an H100 host and on MTIA 300
  timeline.png     one step of dlrm-dcnv2-mlperf on mtia300-64 and on h100-64, per device and stream
  scaling.png      dlrm-dcnv2-mlperf on mtia300 and h100, 16 to 256 chips, strong and weak, and weak
                   with 2D plans (replica counts searched too: TWO_D)
  pareto.png       throughput vs power and vs cost per sample across the 64-chip systems

Error bars (breakdown, attribution, pareto) and bands (tradeoff, scaling) are p10-p90 over DRAWS
draws of the presets' uncertain inputs and the model's own error (uncertainty.propagate), each point
at its plan; an attribution's combinations and the sizes or variants of one machine share its error.

Every point of every figure is evaluated with its own searched plan (analysis.planning: the
study setting, STUDY_ITERATIONS rounds, seed 0), so a figure shows what each machine does with the
plan it wants. Beside each PNG goes a JSON of what it drew: per point the system, the knob values
and global batch that make the point, the plan (Plan.to_dict) and the figures read off its
evaluation, plus the command and settings. tests/test_figures.py re-evaluates the stored plans with
the current model and compares: a model change that moves a figure fails until the figures are
redrawn. This command rewrites these files in the folder it is given (they are its output); the
`perfmodel plot` subcommands never overwrite.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

MODEL = "dlrm-dcnv2-mlperf"
SYSTEMS = ("mtia300-64", "h100-64", "h200-64")
TIMELINE_SYSTEMS = ("mtia300-64", "h100-64")
PARETO_SYSTEMS = ("mtia300-64", "h100-64", "h200-64", "b200-64", "gaudi3-64", "h100cap-64")
ATTRIBUTION = ("h100-64", "mtia300-64")       # (system, reference): the H100 gets MTIA 300's features
# each point is its own search, so the curve has four: the steep end, the two sides of an H100's
# PCIe cap (one Gen5 x16, ~63 GB/s) and the far end
TRADEOFF = {"scale_out_bandwidth_GBps": [12.5, 50, 100, 400], "nic_attach_pcie": [0, 1],
            "offload_engines": [0, 16]}
MTIA_PCIE_GBPS = 630    # a PCIe-attached MTIA NIC as on a GPU host: one Gen5 x16 (~63 GB/s) per active 800G port
SCALING_CHIPS = (16, 64, 256)
TWO_D = "auto"          # the scaling figure's 2D series: the replica counts its searches may take
SCHEMA = 1
DRAWS = 1000            # the error bars: p10-p90 over this many draws of the inputs and the model's error
DRAW_SEED = 0


# ------------------------------------------------------------------------------------------ points

def numbers(bd, system) -> dict[str, float]:
    """What a figure reads off one evaluation: the step, throughput, cost, energy, power, and the
    slowest device's phases (the breakdown's compute bar) with the communication phases' maxima."""
    import numpy as np
    from .evaluate import COMM_PHASES
    from .trace import COMPUTE_PHASES
    comp = np.asarray(bd.compute_s)
    d = int(np.argmax(comp))
    thr = float(bd.samples_per_s)
    out = {"step_s": float(bd.step_s), "samples_per_s": thr, "exposed_comm_s": float(bd.exposed_comm_s),
           "comm_busy_s": float(bd.comm_s), "mfu": float(bd.mfu), "feasible": float(bool(bd.feasible)),
           "usd_per_million_samples": float(bd.usd_per_million_samples),
           "joules_per_sample": float(bd.joules_per_sample), "power_W": float(bd.joules_per_sample) * thr,
           "slowest_device": float(d), "interference_slowest_s": float(np.asarray(bd.interference_s)[d])}
    for p in COMPUTE_PHASES:
        out[f"{p}_slowest_s"] = float(np.asarray(bd.phase_s[p])[d])
    for p in COMM_PHASES:
        out[f"{p}_max_s"] = float(np.max(np.asarray(bd.phase_s[p])))
    return out


def problem(point: dict, model):
    """(system, model) of a stored point: the preset, its knob values, its global batch."""
    import jax.numpy as jnp
    from . import load_system
    from .analysis.attribution import moved
    if point.get("global_batch") is not None:
        model = dataclasses.replace(model, global_batch=jnp.asarray(point["global_batch"], jnp.float32))
    return moved(load_system(point["system"]), model, point.get("knobs") or {})


class Points:
    """Each point's searched plan and evaluation, once per run (figures share points), and its record.
    `plan_all` makes the plans of many points at once on an executor (the searches are independent);
    a point asked for later is planned here."""

    def __init__(self, model, make, executor=None, workers: int | None = None):
        self.model, self.make, self.done = model, make, {}
        self.where = dict(executor=executor, workers=workers)

    @staticmethod
    def _key(system: str, knobs: dict | None = None, global_batch: float | None = None):
        return system, tuple(sorted((knobs or {}).items())), global_batch

    def plan_all(self, keys) -> None:
        """Plan and evaluate every point of `keys` ((system, knobs, global_batch)) not yet done."""
        from . import evaluate
        from .analysis.planning import plans
        todo = {self._key(*k): k for k in keys if self._key(*k) not in self.done}
        points = [{"system": system, "knobs": dict(knobs or {}), "global_batch": batch}
                  for system, knobs, batch in todo.values()]
        problems = [problem(p, self.model) for p in points]
        for key, point, (s, m), plan in zip(todo, points, problems, plans(self.make, problems, **self.where)):
            bd = evaluate(s, m, plan)
            self.done[key] = (bd, dict(point, chips=s.num_chips, plan=plan.to_dict(), values=numbers(bd, s)))

    def __call__(self, system: str, knobs: dict | None = None, global_batch: float | None = None):
        """(Breakdown, record) of the preset `system` with `knobs` set and the global batch given."""
        key = self._key(system, knobs, global_batch)
        self.plan_all([(system, knobs, global_batch)])       # one point: planned in this process
        return self.done[key]


def write_json(out: Path, name: str, points: list[dict], make, **extra) -> None:
    data = {"schema": SCHEMA, "figure": f"{name}.png", "model": MODEL,
            "command": f"make figures (this figure alone: python -m perfmodel.figures docs/img --only {name})",
            "plan": make.label, "iterations": make.iterations, "seed": make.seed, **extra, "points": points}
    (out / f"{name}.json").write_text(json.dumps(data, indent=1) + "\n")


def _drawn(recs: list[dict], model, error_groups=None) -> list:
    """Each record's point at its stored plan over the figures' draws (uncertainty.propagate): the
    same draws for every point, the model's error per machine type unless error_groups say."""
    from .plan import plan_from_dict
    from .uncertainty.propagate import propagate
    probs = [problem(r, model) for r in recs]
    plans = [plan_from_dict(r["plan"], s, m) for r, (s, m) in zip(recs, probs)]
    return propagate([s for s, _ in probs], [m for _, m in probs], plans, DRAWS, DRAW_SEED, error_groups=error_groups)


def _about(res) -> dict:
    from .uncertainty.report import about
    return {**about(res), "draws": DRAWS, "seed": DRAW_SEED}


def _fig(nrows, ncols, size):
    import matplotlib.pyplot as plt
    return plt.subplots(nrows, ncols, figsize=size, layout="constrained", squeeze=False)


def _table(rows: list[dict], keys: list[str]):
    import numpy as np
    from .analysis.table import make_table
    return make_table({k: np.asarray([r[k] for r in rows]) for k in keys})


# ------------------------------------------------------------------------------------------ figures
# `points(name)` lists the points ((system, knobs, global_batch)) figure `name` draws, from the same
# constants and helpers the figure iterates, so main can plan every figure's points at once first.

def _attribution_points(model) -> list[tuple]:
    from . import load_system
    from .analysis.attribution import combinations, default_factors
    sys_name, ref_name = ATTRIBUTION
    factors = default_factors(load_system(sys_name), load_system(ref_name), model)
    return [(sys_name, knobs, None) for _, knobs in combinations(factors)] + [(ref_name, None, None)]


def _tradeoff_panels() -> list[tuple]:
    """(system, extra knobs, title) of each panel."""
    return [("h100-64", {}, "h100-64 (NVLink scale-up; one NIC per GPU)"),
            ("mtia300-64", {"pcie_bandwidth_GBps": MTIA_PCIE_GBPS},
             f"mtia300-64 (NICs carry scale-up too; PCIe case: {MTIA_PCIE_GBPS} GB/s of PCIe)")]


def _tradeoff_knobs(extra: dict) -> list[dict]:
    import itertools
    return [dict(zip(TRADEOFF, values), **extra) for values in itertools.product(*TRADEOFF.values())]


def _scaling_batch(model, mode: str, n: int) -> float | None:
    """The global batch of a scaling point (None: the model's own)."""
    from .analysis.scaling import global_batch
    batch = global_batch(model, mode, n, SCALING_CHIPS[0])
    return None if batch == float(model.global_batch) else batch


def points(name: str, model) -> list[tuple]:
    """The points ((system, knobs, global_batch)) figure `name` draws."""
    if name in ("breakdown", "pareto", "timeline"):
        return [(s, None, None) for s in {"breakdown": SYSTEMS, "pareto": PARETO_SYSTEMS,
                                          "timeline": TIMELINE_SYSTEMS}[name]]
    if name == "attribution":
        return _attribution_points(model)
    if name == "tradeoff":
        return [(s, k, None) for s, extra, _ in _tradeoff_panels() for k in _tradeoff_knobs(extra)]
    return [(f"{fam}-{n}", None, _scaling_batch(model, mode, n)) for fam in ("mtia300", "h100")
            for mode in ("strong", "weak") for n in SCALING_CHIPS]


def two_d_points(name: str, model) -> list[tuple]:
    """The points figure `name` draws with 2D plans (the scaling figure's weak series)."""
    if name != "scaling":
        return []
    return [(f"{fam}-{n}", None, _scaling_batch(model, "weak", n)) for fam in ("mtia300", "h100") for n in SCALING_CHIPS]


def breakdown(out: Path, pts: Points):
    from . import plots
    from .uncertainty.report import interval, ratio
    res = {name: pts(name) for name in SYSTEMS}
    drawn = dict(zip(SYSTEMS, _drawn([r for _, r in res.values()], pts.model)))
    q = {k: interval(u.samples["step_s"], u.nominal["step_s"]) for k, u in drawn.items()}
    ax = plots.breakdown({k: bd for k, (bd, _) in res.items()}, intervals={k: (v["p10"], v["p90"]) for k, v in q.items()},
                         title=f"{MODEL} on 64 chips, each with its searched plan: where the step goes (slowest device; "
                               f"bars: p10-p90 of the step over {DRAWS:,} draws)")
    plots.save_figure(ax, out / "breakdown.png", overwrite=True)
    fast, slow = ATTRIBUTION[1], ATTRIBUTION[0]        # the headline: the H100 system against MTIA 300
    versus = ratio(drawn[slow], drawn[fast])
    versus["prob_faster"] = 1.0 - versus["prob_faster"]     # that the faster of the two (MTIA 300) is faster
    write_json(out, "breakdown", [r for _, r in res.values()], pts.make,
               uncertainty={**_about(drawn[SYSTEMS[0]]), "step_s": q,
                            "versus": {"system": fast, "other": slow, "step_ratio": versus}})


def attribution(out: Path, pts: Points):
    from . import load_system, plots
    from .analysis.attribution import combinations, default_factors, shapley
    sys_name, ref_name = ATTRIBUTION
    system, reference = load_system(sys_name), load_system(ref_name)
    factors = default_factors(system, reference, pts.model)
    combos = combinations(factors)
    recs = [pts(sys_name, knobs)[1] for _, knobs in combos]
    steps = {S: r["values"]["step_s"] for (S, _), r in zip(combos, recs)}
    ref = pts(ref_name)[1]
    shares = shapley({S: -t for S, t in steps.items()}, list(factors))
    base, every, goal = steps[frozenset()], steps[frozenset(factors)], ref["values"]["step_s"]
    sd = attribution_draws_of(recs, ref, combos, list(factors), pts.model)
    from .uncertainty.report import quantiles, shares_dict
    span = lambda x: (quantiles(x)["p10"], quantiles(x)["p90"])
    neg = lambda x: span(-x)
    labels = [sys_name] + [f"+ {f}" for f in factors] + ["everything else", ref_name]
    fig, axes = _fig(1, 1, (9, 4.9))
    plots.waterfall(base, [-shares[f] for f in factors] + [goal - every], goal, labels, ax=axes[0, 0],
                    intervals=[span(sd.steps[frozenset()])] + [neg(sd.shares[f]) for f in factors]
                    + [neg(sd.rest), span(sd.reference)],
                    title=f"{MODEL}: {sys_name} given {ref_name}'s features, each combination re-searched "
                          f"(Shapley shares; {pts.make.label}; bars and brackets: p10-p90 over {DRAWS:,} draws)")
    plots_save(fig, out / "attribution.png")
    write_json(out, "attribution", recs + [ref], pts.make, system=sys_name, reference=ref_name,
               factors=factors, combinations=[sorted(S) for S, _ in combos],
               shares_s=shares, gap_s=base - goal, rest_s=every - goal, uncertainty=shares_dict(sd))


def attribution_draws_of(recs: list[dict], ref: dict, combos, factors: list[str], model):
    """The attribution's shares at the figures' draws (analysis.attribution.shares_draws), from the
    stored points: each combination's system, model and plan, and the reference's."""
    from .plan import plan_from_dict
    from .analysis.attribution import shares_draws
    probs = [problem(r, model) for r in recs]
    parts = [(S, s, m, plan_from_dict(r["plan"], s, m)) for (S, _), r, (s, m) in zip(combos, recs, probs)]
    rs, rm = problem(ref, model)
    return shares_draws(factors, parts, (rs, rm, plan_from_dict(ref["plan"], rs, rm)), DRAWS, DRAW_SEED)


def plots_save(fig, path: Path) -> None:
    from . import plots
    plots.save_figure(fig, path, overwrite=True)


def tradeoff(out: Path, pts: Points):
    from . import plots
    from .uncertainty.report import interval
    fig, axes = _fig(1, 2, (13, 4.8))
    records = []
    for ax, (name, extra, title) in zip(axes[0], _tradeoff_panels()):
        rows, recs = [], []
        for knobs in _tradeoff_knobs(extra):
            _, rec = pts(name, knobs)
            recs.append(rec)
            rows.append(dict(knobs, step_ms=rec["values"]["step_s"] * 1e3, feasible=bool(rec["values"]["feasible"])))
        drawn = _drawn(recs, pts.model, error_groups=[0] * len(recs))     # variants of one machine: one error
        for row, rec, u in zip(rows, recs, drawn):
            q = interval(u.samples["step_s"])
            row.update({f"step_ms_{k}": v * 1e3 for k, v in q.items()})
            rec["interval"] = {"step_s": q}
        records += recs
        plots.tradeoff(_table(rows, [*TRADEOFF, "step_ms", "step_ms_p10", "step_ms_p50", "step_ms_p90", "feasible"]),
                       ax=ax, title=title)
    fig.suptitle(f"{MODEL}: step time vs scale-out NIC bandwidth (each point with its searched plan: "
                 f"{pts.make.label}; bands: p10-p90 over {DRAWS:,} draws)", fontsize=11)
    plots_save(fig, out / "tradeoff.png")
    write_json(out, "tradeoff", records, pts.make, vary=TRADEOFF, uncertainty={"draws": DRAWS, "seed": DRAW_SEED})


def timeline(out: Path, pts: Points):
    from . import plots
    fig, axes = _fig(2, 1, (11, 7.5))
    recs = []
    for ax, name in zip(axes[:, 0], TIMELINE_SYSTEMS):
        bd, rec = pts(name)
        recs.append(rec)
        plots.timeline(bd, ax=ax, max_devices=2, model=pts.model,
                       title=f"{MODEL} on {name}, searched plan: one step (slowest and fastest device)")
    plots_save(fig, out / "timeline.png")
    write_json(out, "timeline", recs, pts.make)


def scaling(out: Path, pts: Points):
    from . import plots
    from .uncertainty.propagate import quantiles
    fig, axes = _fig(1, 2, (13, 4.8))
    records, series = [], {}
    for ax, fam in zip(axes[0], ("mtia300", "h100")):
        rows = []
        for mode in ("strong", "weak", "weak 2D"):
            mine, recs = [], []
            for n in SCALING_CHIPS:
                where = pts.two_d if mode == "weak 2D" else pts
                _, rec = where(f"{fam}-{n}", global_batch=_scaling_batch(pts.model, mode.split()[0], n))
                rec = dict(rec, series="2D") if mode == "weak 2D" else rec
                recs.append(rec)
                mine.append(dict(chips=n, mode=mode, samples_per_s=rec["values"]["samples_per_s"]))
            records += recs
            # the sizes of one family share their inputs' draws and the model's error: efficiency draw by draw
            drawn = _drawn(recs, pts.model, error_groups=[0] * len(recs))
            thr0, draws0 = mine[0]["samples_per_s"], drawn[0].samples["samples_per_s"]
            for r, u in zip(mine, drawn):
                r["efficiency"] = r["samples_per_s"] / thr0 / (r["chips"] / SCALING_CHIPS[0])
                thr = u.samples["samples_per_s"]
                for col, x in (("samples_per_s", thr), ("efficiency", thr / draws0 / (r["chips"] / SCALING_CHIPS[0]))):
                    r.update({f"{col}_{k}": v for k, v in quantiles(x).items()})
            rows += mine
            series[f"{fam} {mode}"] = {str(r["chips"]): {k: v for k, v in r.items() if k not in ("chips", "mode")}
                                       for r in mine}
        cols = ["chips", "mode"] + [f"{c}{q}" for c in ("samples_per_s", "efficiency") for q in ("", "_p10", "_p50", "_p90")]
        plots.scaling(_table(rows, cols), ax=ax, title=f"{MODEL} on {fam}, searched plan per size (2D: replicas searched)")
    fig.suptitle(f"bands: p10-p90 over {DRAWS:,} draws of the presets' uncertain inputs and the model's own error "
                 "(the sizes of one family share both)", fontsize=10)
    plots_save(fig, out / "scaling.png")
    write_json(out, "scaling", records, pts.make, chips=list(SCALING_CHIPS), series=series,
               plan_2d=pts.two_d.make.label, uncertainty={"draws": DRAWS, "seed": DRAW_SEED})


def pareto(out: Path, pts: Points):
    import numpy as np
    from . import plots
    from .analysis.scaling import compare
    from .analysis.table import columns, make_table
    from .uncertainty.propagate import quantiles
    res = {name: pts(name) for name in PARETO_SYSTEMS}
    table = compare(PARETO_SYSTEMS, pts.model, plan=pts.make, breakdowns={k: bd for k, (bd, _) in res.items()})
    drawn = _drawn([r for _, r in res.values()], pts.model)
    cols, bars = columns(table), {}
    for u in drawn:
        thr = u.samples["samples_per_s"]
        for k, x in (("samples_per_s", thr), ("usd_per_million_samples", u.samples["usd_per_million_samples"]),
                     ("power_W", u.samples["joules_per_sample"] * thr)):
            for q, v in quantiles(x).items():
                bars.setdefault(f"{k}_{q}", []).append(v)
    table = make_table({**cols, **{k: np.asarray(v) for k, v in bars.items()}})
    fig, axes = _fig(1, 2, (13, 4.8))
    plots.pareto(table, x="power_W", ax=axes[0, 0], title="throughput vs power (all hosts)")
    plots.pareto(table, ax=axes[0, 1], title="throughput vs cost (equal placeholder prices per chip)")
    fig.suptitle(f"{MODEL} on 64 chips of each system, each with its searched plan ({pts.make.label}; bars: p10-p90 "
                 f"over {DRAWS:,} draws)", fontsize=11)
    plots_save(fig, out / "pareto.png")
    write_json(out, "pareto", [r for _, r in res.values()], pts.make,
               uncertainty={"draws": DRAWS, "seed": DRAW_SEED,
                            "systems": {n: {k: bars[k][i] for k in bars} for i, n in enumerate(PARETO_SYSTEMS)}})


FIGURES = {"breakdown": breakdown, "attribution": attribution, "tradeoff": tradeoff, "timeline": timeline,
           "scaling": scaling, "pareto": pareto}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m perfmodel.figures", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", help="where to write the PNGs and their JSON (created if missing)")
    ap.add_argument("--only", help="comma-separated subset of: " + ", ".join(FIGURES))
    ap.add_argument("--workers", type=int,
                    help="processes searching the points in parallel (default: $PERFMODEL_WORKERS, else the cores)")
    args = ap.parse_args(argv)
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    from . import enable_compile_cache, load_model
    from .analysis.planning import planner
    names = [n.strip() for n in args.only.split(",")] if args.only else list(FIGURES)
    bad = [n for n in names if n not in FIGURES]
    if bad:
        print(f"perfmodel.figures: error: unknown figure {bad[0]!r}; known: {', '.join(FIGURES)}", file=sys.stderr)
        return 2
    enable_compile_cache()
    out = Path(args.folder)
    out.mkdir(parents=True, exist_ok=True)
    pts = Points(load_model(MODEL), planner("search", seed=0), workers=args.workers)
    pts.two_d = Points(pts.model, planner("search", seed=0, replicas=TWO_D), workers=args.workers)
    t = time.perf_counter()
    pts.plan_all([k for n in names for k in points(n, pts.model)])
    pts.two_d.plan_all([k for n in names for k in two_d_points(n, pts.model)])
    print(f"searched {len(pts.done) + len(pts.two_d.done)} points ({time.perf_counter() - t:.1f} s)", flush=True)
    for n in names:
        t = time.perf_counter()
        FIGURES[n](out, pts)
        print(f"wrote {out / (n + '.png')} and {n}.json ({time.perf_counter() - t:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
