"""Elasticities of step time (or cost, or energy) with respect to every hardware parameter, at the
plan each machine wants (a searched plan by default).

    e_i = d log(metric) / d log(x_i) = (x_i / metric) d metric / d x_i

by one `jax.grad` of log(metric) with respect to the whole System pytree (every leaf at once),
times the leaf. e = -0.3 for HBM bandwidth: 1 % more bandwidth, 0.3 % shorter step. A leaf at zero
(e.g. the PCIe switch `nic.pcie` of an integrated NIC) has elasticity 0 by definition; its
derivative (per unit, in the table) still says which way a small change moves the metric. Where
the model has a kink (a max of two paths, a bandwidth cap) the gradient is that of the active side.

The gradient is taken at a fixed plan: by default the searched one (`plan="search"`, see
analysis.planning). By the envelope theorem, for plan choices that vary continuously and sit at an
interior optimum p*(x), d step*(x) / dx = d step(x, p) / dx at p = p*(x): the plan's own response
is second order, so the fixed-plan elasticity is that of the optimized step. A plan's discrete
choices (sharding types, placements, algorithms, precisions) do not move with x until a switch: the
fixed-plan elasticity is then the slope of the current plan's branch of step*(x) = min over plans,
exact between switches and blind to one that is near. `replan=K` checks it: for the K highest-ranked
parameters with a sweep knob, the central finite difference of the re-searched step,

    e_fd = [log m*(x(1 + h)) - log m*(x(1 - h))] / [log(1 + h) - log(1 - h)],

each side searched afresh (the same planner). Where it disagrees with the fixed-plan elasticity a
discrete switch is within h: trust the re-searched figure.
"""

from __future__ import annotations

import jax
import numpy as np

from ..config import ConfigError
from ..evaluate import resolve
from ..hardware import System
from ..plan import Plan, PlanArrays, to_arrays, validate_plan
from ..workload import RankingModel
from .leaves import elasticities, leaf_info
from .table import columns, make_table

METRICS = ("step_s", "usd_per_million_samples", "joules_per_sample")

def _eligible(table, system, model, plan_arrays, h: float, k: int) -> list[tuple[int, str, float]]:
    """(row, knob, knob value) of the first k ranked rows whose knob moves their leaf by (1 +- h)."""
    from .. import knobs as K
    c = columns(table)
    leaf_of = {p: i for i, (p, *_) in enumerate(leaf_info(system))}
    out = []
    for i in range(len(c["rank"])):
        if len(out) == k:
            break
        name = c["knob"][i]
        if not name or c["value"][i] == 0:
            continue
        kn = K.knob(name)
        state = K.State(system, model, plan_arrays)
        if kn.choices or kn.integer or (kn.applies and kn.applies(state)):
            continue
        v = float(kn.get(state))
        if v == 0 or not (kn.lo <= v * (1 - h) and v * (1 + h) <= kn.hi):
            continue
        # the knob must move this leaf in proportion (a knob may set a neighbour, e.g. ports vs port bandwidth)
        j = leaf_of[c["path"][i]]
        moved = jax.tree_util.tree_leaves(K.set_knobs(system, model, plan_arrays, **{name: v * (1 + h)}).system)[j]
        before = jax.tree_util.tree_leaves(system)[j]
        if abs(float(moved) / float(before) - (1 + h)) > 1e-4:
            continue
        out.append((i, name, v))
    return out


def replanned_elasticities(system: System, model: RankingModel, knob_values: list[tuple[str, float]],
                           make, metric: str = "step_s", h: float = 0.1, executor=None,
                           workers: int | None = None, ray_address: str | None = None) -> list[float]:
    """e_fd of each (knob, value) (see the module doc): one paired sweep of 2K points, each moving one
    knob to x(1 -+ h) with the others at their value, every point searched (in parallel on `executor`,
    `workers`, `ray_address`, as sweep runs them)."""
    from .readout import si_column
    from .sweep import sweep
    if not knob_values:
        return []
    names = [n for n, _ in knob_values]
    vary = {n: [] for n in names}
    for i, (n, v) in enumerate(knob_values):
        for side in (1 - h, 1 + h):
            for j, (m, w) in enumerate(knob_values):
                vary[m].append(w * side if j == i else w)
    t = si_column(sweep(system, model, vary, plan=make, paired=True, executor=executor, workers=workers,
                        ray_address=ray_address), metric)
    lo, hi = t[0::2], t[1::2]
    return [float(e) for e in (np.log(hi) - np.log(lo)) / (np.log1p(h) - np.log1p(-h))]


def _check_metric_positive(system: System, metric: str) -> None:
    """One error before any search where the metric is 0 by the presets (prices or power of 0, which
    the schema allows): the log of 0 gives no elasticity, only NaN."""
    if metric == "usd_per_million_samples":
        price = float(system.chip.usd_per_hour) + float(system.host_usd_per_hour)
        if not price > 0:
            raise ConfigError(system.name, "usd_per_hour, host_usd_per_hour",
                              "are both 0, so the cost is 0 and has no elasticity; set a price or choose "
                              f"another metric ({', '.join(m for m in METRICS if m != metric)})")
    if metric == "joules_per_sample" and not float(system.host_power_W) > 0:
        raise ConfigError(system.name, "host_power_W", "is 0, so the energy is 0 and has no elasticity; set the "
                          f"host's power or choose another metric ({', '.join(m for m in METRICS if m != metric)})")


def sensitivity(system: System, model: RankingModel, plan="search", metric: str = "step_s", *,
                iterations: int | None = None, seed: int = 0, replan: int = 0, h: float = 0.1, executor=None,
                workers: int | None = None, ray_address: str | None = None):
    """Elasticities d log(metric) / d log(x) for every hardware leaf x of `system`, ranked by size.

    plan: the plan to differentiate at, as in analysis.planning ("search", the default, with
    `iterations` rounds and `seed`; "greedy"; a Plan, PlanArrays or plan JSON; a callable).
    metric: step_s, usd_per_million_samples or joules_per_sample. replan: for this many of the
    top-ranked parameters that have a sweep knob, also the re-searched finite-difference elasticity
    at x(1 +- h) (see the module doc: where the two disagree, a discrete plan switch is near),
    searched where sweep runs its points (`executor`, `workers`, `ray_address`: see analysis.executors).

    Returns a table (DataFrame or dict of numpy columns) with columns rank, parameter, path, unit,
    value (in unit), elasticity (at the fixed plan), derivative_per_unit (metric units per one unit
    of the parameter), knob (the sweep knob that moves it, where there is one), plan (the plan's
    label) and, with replan > 0, replan_elasticity (None where not computed).
    """
    from .planning import planner
    if metric not in METRICS:
        raise ConfigError("", "metric", f"is {metric!r}; allowed: {', '.join(METRICS)}")
    if isinstance(replan, bool) or not isinstance(replan, (int, np.integer)) or replan < 0:
        raise ConfigError("", "replan", f"must be an integer >= 0 (parameters to re-search), got {replan!r}")
    if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 < h < 1:
        raise ConfigError("", "h", f"must be a relative step between 0 and 1 (e.g. 0.1), got {h!r}")
    system, model, _ = resolve(system, model)      # preset names and paths work too
    _check_metric_positive(system, metric)
    make = planner(plan, iterations=iterations, seed=seed)
    fixed = plan if isinstance(plan, PlanArrays) else make(system, model)
    if isinstance(fixed, Plan):
        validate_plan(fixed, system, model)
        fixed = to_arrays(fixed, system, model)
    m, leaves = elasticities(system, model, fixed, metric)
    if not (np.isfinite(m) and m > 0):
        raise ConfigError("", "metric", f"{metric} is {m:g} at this plan; an elasticity needs a positive, finite metric")
    rows = [(path, name, unit, x / scale, e, d * scale, kn) for path, name, unit, scale, kn, x, d, e in leaves]
    rows.sort(key=lambda r: (-abs(r[4]), -abs(r[5]), r[0]))
    n = len(rows)
    cols = {
        "rank": np.arange(1, n + 1),
        "parameter": np.asarray([r[1] for r in rows], object),
        "path": np.asarray([r[0] for r in rows], object),
        "unit": np.asarray([r[2] for r in rows], object),
        "value": np.asarray([r[3] for r in rows], np.float64),
        "elasticity": np.asarray([r[4] for r in rows], np.float64),
        "derivative_per_unit": np.asarray([r[5] for r in rows], np.float64),
        "knob": np.asarray([r[6] for r in rows], object),
        "plan": np.asarray([make.label] * n, object),
    }
    if replan:
        picked = _eligible(cols, system, model, fixed, h, int(replan))
        fd = replanned_elasticities(system, model, [(kn, v) for _, kn, v in picked], make, metric, h,
                                    executor, workers, ray_address)
        cols["replan_elasticity"] = np.asarray([None] * n, object)
        for (i, _, _), e in zip(picked, fd):
            cols["replan_elasticity"][i] = e
    return make_table(cols)


def format_sensitivity(table, metric: str, top: int | None = None, title: str = "") -> str:
    """The ranked table as text: value, elasticity at the plan, and the re-searched one where computed."""
    c = columns(table)
    n = len(c["rank"]) if top is None else min(top, len(c["rank"]))
    fd = c.get("replan_elasticity")
    lines = [title, "=" * len(title)] if title else []
    lines.append(f"elasticity = d log({metric}) / d log(parameter): +1 % in the parameter -> "
                 f"elasticity % in {metric}")
    if "plan" in c and len(c["plan"]):
        lines.append(f"at the plan: {c['plan'][0]}; for the optimized {metric} this is exact for continuous plan "
                     "choices (envelope theorem) and the slope of this plan's branch for discrete ones (sharding, "
                     "placement)" + ("; re-searched: the same planner at x(1 +- h), trust it where they differ"
                                     if fd is not None else ""))
    lines.append(f"{'#':>3}  {'parameter':<46} {'value':>12} {'unit':<8} {'elasticity':>11}  "
                 + (f"{'re-searched':>11}  " if fd is not None else "") + "knob")
    for i in range(n):
        v = c["value"][i]
        val = f"{v:.4g}" if v == 0 or 1e-3 <= abs(v) < 1e6 else f"{v:.3e}"
        re = "" if fd is None else (f"{fd[i]:>+11.4f}  " if fd[i] is not None else f"{'-':>11}  ")
        lines.append(f"{c['rank'][i]:>3}  {c['parameter'][i]:<46} {val:>12} {c['unit'][i]:<8} "
                     f"{c['elasticity'][i]:>+11.4f}  {re}{c['knob'][i]}")
    rest = len(c["rank"]) - n
    if rest > 0:
        lines.append(f"({rest} more parameters with smaller elasticities; --top 0 shows all)")
    return "\n".join(lines)
