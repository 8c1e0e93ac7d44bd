"""Across systems and sizes: `compare` (one model on several systems) and `scaling` (one system
family at several chip counts, weak or strong). The chip count fixes array shapes, so each size is
its own evaluation (and its own plan), not a vmapped point.

Scaling efficiency at N chips, against the smallest size N0:
    efficiency = (throughput_N / throughput_N0) / (N / N0)
strong: the global batch stays; weak: it grows with N (batch per chip fixed).

uncertainty=N adds error bars (perfmodel.uncertainty.propagate): every size at its own plan, at the
same N draws of the files' inputs (shared by name: the sizes of a family read the same files) and
one draw of the model's own error for the whole family (the same machine type), so a size's
efficiency is taken draw by draw against the smallest size's draws: `<col>_p10`, `<col>_p50` and
`<col>_p90` of UNCERTAIN_COLUMNS beside the nominal columns.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from ..evaluate import Breakdown, as_model, as_system, evaluate
from ..hardware import System, load_system
from ..schema import MAX_CHIPS
from ..workload import RankingModel
from .planning import planner, plans
from .table import columns, make_table

MODES = ("strong", "weak")
UNCERTAIN_COLUMNS = ("step_ms", "samples_per_s", "efficiency")


def _make(plan, iterations, seed, replicas=1):
    return planner(plan, iterations=iterations, seed=seed, replicas=replicas)


def evaluate_systems(systems: Sequence, model: RankingModel, plan="search", *, iterations: int | None = None,
                     seed: int = 0, executor=None, workers: int | None = None,
                     ray_address: str | None = None, replicas=1) -> dict[str, Breakdown]:
    """{system name: Breakdown} of `model` on each system (names or Systems), each with the plan
    `plan` makes for it (planning.planner: a search per system by default), the plans made on
    `executor` (planning.plans: a local process pool by default). A fixed plan that does not fit a
    system is a ConfigError naming the system. replicas: the searches' replica counts (pm.search;
    "auto": 2D plans too)."""
    systems, model, found = _planned(systems, model, _make(plan, iterations, seed, replicas), executor, workers,
                                     ray_address)
    return {s.name: evaluate(s, model, p) for s, p in zip(systems, found)}


def _planned(systems, model, make, executor, workers, ray_address):
    """(the Systems, the model, each system's plan `make` makes), the systems checked and distinct."""
    model = as_model(model)
    if isinstance(systems, (str, System)) or not isinstance(systems, Sequence) or not systems:
        raise ConfigError("", "systems", f"must be a non-empty list of systems (names, paths or Systems), got {systems!r}")
    systems = distinct([as_system(s) for s in systems])
    return systems, model, plans(make, [(s, model) for s in systems], executor, workers, ray_address)


def distinct(systems: list[System], field: str = "systems") -> list[System]:
    """`systems`, each named once: results are kept by system name, so a second one of a name would
    be lost (a table of one row, a JSON index out of range)."""
    seen = set()
    for s in systems:
        if s.name in seen:
            raise ConfigError("", field, f"names system {s.name!r} twice; list each system once")
        seen.add(s.name)
    return systems


def compare(systems: Sequence, model: RankingModel, plan="search", breakdowns: dict[str, Breakdown] | None = None,
            *, iterations: int | None = None, seed: int = 0, executor=None, workers: int | None = None,
            ray_address: str | None = None, replicas=1, uncertainty: int | None = None, uncertainty_seed: int = 0,
            model_error=True):
    """One row per system (or per entry of `breakdowns`, if given; `plan` then names how they were
    planned): chips, step_ms, samples_per_s, exposed_comm_ms, mfu, feasible, usd_per_million_samples,
    joules_per_sample, power_W (all hosts, = joules/sample x samples/s) and plan (its label);
    executor, workers, ray_address, replicas: as evaluate_systems.
    uncertainty: a number of draws (perfmodel.uncertainty; seeded by uncertainty_seed, with the
    model's own error unless model_error=False): adds step_ms_p10 / _p50 / _p90, step_vs_first_p10 /
    _p50 / _p90 (the system's step over the first system's, draw by draw) and prob_first_faster (the
    probability that the first system's step is the shorter; NaN on its own row). The systems are
    planned here, so `breakdowns` must not be given with it."""
    label = _make(plan, iterations, seed, replicas).label
    if uncertainty is not None:
        if breakdowns is not None:
            raise ConfigError("", "breakdowns", "cannot be given with uncertainty: the draws evaluate the plans "
                              "compare makes (give the systems and the plan)")
        return _compare_drawn(systems, model, plan, iterations, seed, executor, workers, ray_address, replicas,
                              uncertainty, uncertainty_seed, model_error)
    bds = breakdowns if breakdowns is not None else evaluate_systems(
        systems, model, plan, iterations=iterations, seed=seed, executor=executor, workers=workers,
        ray_address=ray_address, replicas=replicas)
    if not bds:
        raise ConfigError("", "breakdowns", "is empty: give at least one system's Breakdown")
    rows = []
    for name, bd in bds.items():
        thr = float(bd.samples_per_s)
        rows.append(dict(system=name, chips=chips_of(bd), step_ms=float(bd.step_s) * 1e3, samples_per_s=thr,
                         exposed_comm_ms=float(bd.exposed_comm_s) * 1e3, mfu=float(bd.mfu), feasible=bool(bd.feasible),
                         usd_per_million_samples=float(bd.usd_per_million_samples),
                         joules_per_sample=float(bd.joules_per_sample),
                         power_W=float(bd.joules_per_sample) * thr, replicas=int(bd.replicas), plan=label))
    cols = {k: np.asarray([r[k] for r in rows], dtype=object if k in ("system", "plan") else None) for k in rows[0]}
    return make_table(cols)


def _compare_drawn(systems, model, plan, iterations, seed, executor, workers, ray_address, replicas, draws,
                   useed, model_error):
    """compare() with uncertainty=draws (its docstring)."""
    from ..uncertainty.propagate import check_draws, check_seed, model_error_of, propagate, quantiles
    draws, useed = check_draws(draws, "uncertainty"), check_seed(useed, "uncertainty_seed")
    me = model_error_of(model_error)
    make = _make(plan, iterations, seed, replicas)
    systems, model, found = _planned(systems, model, make, executor, workers, ray_address)
    table = compare(systems, model, make, {s.name: evaluate(s, model, p) for s, p in zip(systems, found)})
    res = propagate(systems, [model] * len(systems), found, draws, useed, me)
    cols = columns(table)
    first = res[0].samples["step_s"]
    extra: dict[str, list] = {}
    for r in res:
        t = r.samples["step_s"]
        for name, x in (("step_ms", t * 1e3), ("step_vs_first", t / first)):
            for k, v in quantiles(x).items():
                extra.setdefault(f"{name}_{k}", []).append(v)
        extra.setdefault("prob_first_faster", []).append(float(np.mean(first < t)) if r is not res[0] else np.nan)
    plan_col = cols.pop("plan")
    return make_table({**cols, **{k: np.asarray(v, np.float64) for k, v in extra.items()}, "plan": plan_col})


def chips_of(bd: Breakdown) -> int:
    """The chips a Breakdown's figures are for: the whole system's (a 2D plan's per-device arrays are
    one sharding group's)."""
    return int(bd.num_chips) * bd.replicas


def global_batch(model: RankingModel, mode: str, n: int, n0: int) -> float | int:
    """The global batch of the point at n chips of a scaling study from n0: the model's own (strong),
    or grown with the chips, the batch per chip fixed (weak)."""
    b0 = float(model.global_batch)
    return b0 if mode == "strong" else round(b0 * n / n0)


def scaling(system, model: RankingModel, chips: Sequence[int], mode: str = "strong", plan="search", *,
            iterations: int | None = None, seed: int = 0, executor=None, workers: int | None = None,
            ray_address: str | None = None, replicas=1, uncertainty: int | None = None, uncertainty_seed: int = 0,
            model_error=True):
    """Throughput and scaling efficiency of `model` on `system`'s family at each chip count: one row
    per size with chips, mode, global_batch, step_ms, samples_per_s, exposed_comm_ms, feasible,
    replicas (the plan's sharding groups: 1 unless replicas= lets the search make 2D plans),
    speedup, efficiency and plan.

    system: a preset name (`mtia300-64`) or a System loaded from one; each size loads the family at
    that size. mode: strong (fixed global batch) or weak (global batch x N / N0). plan, iterations,
    seed, replicas: as planning.planner (a search per size by default: each size gets the plan it
    wants); executor, workers, ray_address: where the sizes are planned (planning.plans).
    uncertainty: a number of draws (2 to uncertainty.MAX_DRAWS) of the files' uncertain inputs,
    seeded by uncertainty_seed, with the model's own error unless model_error=False (a ModelError:
    that one); adds `<col>_p10`, `<col>_p50`, `<col>_p90` of UNCERTAIN_COLUMNS (the module doc).
    """
    if mode not in MODES:
        raise ConfigError("", "mode", f"is {mode!r}; allowed: {', '.join(MODES)}")
    whole = lambda c: isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) and 1 <= c <= MAX_CHIPS
    if isinstance(chips, str) or not isinstance(chips, (Sequence, np.ndarray)) or len(chips) == 0 \
            or not all(whole(c) for c in chips):
        raise ConfigError("", "chips", f"must list chip counts, integers from 1 to {MAX_CHIPS:,}, got {chips!r}")
    chips = sorted({int(c) for c in chips})
    if uncertainty is not None:                    # checked before any size is planned
        from ..uncertainty.propagate import check_draws, check_seed, model_error_of
        draws, useed = check_draws(uncertainty, "uncertainty"), check_seed(uncertainty_seed, "uncertainty_seed")
        me = model_error_of(model_error)
    name = system.name if isinstance(system, System) else str(system)
    model = as_model(model)
    make = _make(plan, iterations, seed, replicas)
    n0 = chips[0]
    points = [(load_system(name, chips=n), model if mode == "strong" else dataclasses.replace(
        model, global_batch=jnp.asarray(global_batch(model, mode, n, n0), jnp.float32))) for n in chips]
    rows = []
    found = plans(make, points, executor, workers, ray_address)
    for n, (s, m), p in zip(chips, points, found):
        bd = evaluate(s, m, p)
        rows.append(dict(chips=n, mode=mode, global_batch=float(m.global_batch), step_ms=float(bd.step_s) * 1e3,
                         samples_per_s=float(bd.samples_per_s), exposed_comm_ms=float(bd.exposed_comm_s) * 1e3,
                         feasible=bool(bd.feasible), replicas=int(p.replicas)))
    thr0 = rows[0]["samples_per_s"]
    for r in rows:
        r["speedup"] = r["samples_per_s"] / thr0
        r["efficiency"] = r["speedup"] / (r["chips"] / n0)
        r["plan"] = make.label
    if uncertainty is not None:
        _with_intervals(rows, points, found, draws, useed, me)
    cols = {k: np.asarray([r[k] for r in rows], dtype=object if k in ("mode", "plan") else None) for k in rows[0]}
    return make_table(cols)


def _with_intervals(rows: list[dict], points: list, found: list, draws: int, seed: int, me) -> None:
    """Each row with the p10 / p50 / p90 of UNCERTAIN_COLUMNS (module doc), before its `plan`."""
    from ..uncertainty.propagate import propagate, quantiles
    from ..report import announced_bar
    line = (f"scaling: {draws:,} draws at each of {len(points)} size{'s' * (len(points) > 1)}, a vectorized call per "
            "size (each compiles: its shapes are its own)")
    with announced_bar(line, len(points), "size"):
        res = propagate([s for s, _ in points], [m for _, m in points], found, draws, seed, me,
                        error_groups=[0] * len(points))
    thr0 = res[0].samples["samples_per_s"]
    n0 = rows[0]["chips"]
    for r, u in zip(rows, res):
        thr = u.samples["samples_per_s"]
        with np.errstate(divide="ignore", invalid="ignore"):
            drawn = {"step_ms": u.samples["step_s"] * 1e3, "samples_per_s": thr,
                     "efficiency": thr / thr0 / (r["chips"] / n0)}
        plan = r.pop("plan")
        for col in UNCERTAIN_COLUMNS:
            for k, v in quantiles(drawn[col]).items():
                r[f"{col}_{k}"] = v
        r["plan"] = plan
