"""Across systems and sizes: `compare` (one model on several systems) and `scaling` (one system
family at several chip counts, weak or strong). The chip count fixes array shapes, so each size is
its own evaluation (and its own plan), not a vmapped point.

Scaling efficiency at N chips, against the smallest size N0:
    efficiency = (throughput_N / throughput_N0) / (N / N0)
strong: the global batch stays; weak: it grows with N (batch per chip fixed).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import jax.numpy as jnp
import numpy as np

from ..config import ConfigError
from ..evaluate import Breakdown, as_model, as_system, evaluate
from ..hardware import System, load_system
from ..schema import MAX_CHIPS
from ..workload import RankingModel
from .table import make_table

MODES = ("strong", "weak")


def _planner(plan):
    if plan is None:
        from ..search.greedy import default_plan
        return default_plan
    if callable(plan):
        return plan
    raise ConfigError("", "plan", "must be None (the default plan per system) or a callable (system, model) -> Plan")


def _as_plan(result):
    """A planner's answer: a Plan, or a search result carrying one in .plan (pm.search)."""
    return getattr(result, "plan", result)


def evaluate_systems(systems: Sequence, model: RankingModel, plan: Callable | None = None) -> dict[str, Breakdown]:
    """{system name: Breakdown} of `model` on each system (names or Systems), each with its own plan
    (the default plan unless `plan(system, model)` is given)."""
    make = _planner(plan)
    model = as_model(model)
    if isinstance(systems, (str, System)) or not isinstance(systems, Sequence) or not systems:
        raise ConfigError("", "systems", f"must be a non-empty list of systems (names, paths or Systems), got {systems!r}")
    out = {}
    for s in systems:
        system = as_system(s)
        out[system.name] = evaluate(system, model, _as_plan(make(system, model)))
    return out


def compare(systems: Sequence, model: RankingModel, plan: Callable | None = None,
            breakdowns: dict[str, Breakdown] | None = None):
    """One row per system (or per entry of `breakdowns`, if given): chips, step_s, samples_per_s, exposed_comm_s, mfu, feasible,
    usd_per_million_samples, joules_per_sample and power_W (all hosts, = joules/sample x samples/s)."""
    bds = breakdowns if breakdowns is not None else evaluate_systems(systems, model, plan)
    if not bds:
        raise ConfigError("", "breakdowns", "is empty: give at least one system's Breakdown")
    rows = []
    for name, bd in bds.items():
        thr = float(bd.samples_per_s)
        rows.append(dict(system=name, chips=int(bd.num_chips), step_s=float(bd.step_s), samples_per_s=thr,
                         exposed_comm_s=float(bd.exposed_comm_s), mfu=float(bd.mfu), feasible=bool(bd.feasible),
                         usd_per_million_samples=float(bd.usd_per_million_samples),
                         joules_per_sample=float(bd.joules_per_sample),
                         power_W=float(bd.joules_per_sample) * thr))
    cols = {k: np.asarray([r[k] for r in rows], dtype=object if k == "system" else None) for k in rows[0]}
    return make_table(cols)


def scaling(system, model: RankingModel, chips: Sequence[int], mode: str = "strong",
            plan: Callable | None = None):
    """Throughput and scaling efficiency of `model` on `system`'s family at each chip count.

    system: a preset name (`mtia300-64`) or a System loaded from one; each size loads the family at
    that size. mode: strong (fixed global batch) or weak (global batch x N / N0). plan: a callable
    (system, model) -> Plan, the default plan per size unless given.
    """
    if mode not in MODES:
        raise ConfigError("", "mode", f"is {mode!r}; allowed: {', '.join(MODES)}")
    whole = lambda c: isinstance(c, (int, np.integer)) and not isinstance(c, (bool, np.bool_)) and 1 <= c <= MAX_CHIPS
    if isinstance(chips, str) or not isinstance(chips, (Sequence, np.ndarray)) or len(chips) == 0 \
            or not all(whole(c) for c in chips):
        raise ConfigError("", "chips", f"must list chip counts, integers from 1 to {MAX_CHIPS:,}, got {chips!r}")
    chips = sorted({int(c) for c in chips})
    name = system.name if isinstance(system, System) else str(system)
    model = as_model(model)
    make = _planner(plan)
    n0 = chips[0]
    b0 = float(model.global_batch)
    rows = []
    for n in chips:
        s = load_system(name, chips=n)
        m = model if mode == "strong" else dataclasses.replace(
            model, global_batch=jnp.asarray(round(b0 * n / n0), jnp.float32))
        bd = evaluate(s, m, _as_plan(make(s, m)))
        rows.append(dict(chips=n, mode=mode, global_batch=float(m.global_batch), step_s=float(bd.step_s),
                         samples_per_s=float(bd.samples_per_s), exposed_comm_s=float(bd.exposed_comm_s),
                         feasible=bool(bd.feasible)))
    thr0 = rows[0]["samples_per_s"]
    for r in rows:
        r["speedup"] = r["samples_per_s"] / thr0
        r["efficiency"] = r["speedup"] / (r["chips"] / n0)
    cols = {k: np.asarray([r[k] for r in rows], dtype=object if k == "mode" else None) for k in rows[0]}
    return make_table(cols)
