"""Co-design: search a continuous hardware knob together with the plan.

Knobs
  nic_split      share of the NIC bandwidth on scale-up, on chips whose NICs carry both (MTIA 300,
                 Gaudi 3); objective: step time
  scale_out_bw   the NIC's scale-out bandwidth per chip (GB/s), priced: chip $/h + price x GB/s
                 (assumed 0.0025 $ per GB/s-hour: a 400 Gb/s NIC and switch port, ~3,000 $,
                 amortized over 3 years); objective: cost per sample. A PCIe link in front of
                 the NIC still caps what it carries (bandwidth beyond it is paid for and unused)
Each knob is read and set by the knob a sweep of it uses (perfmodel.knobs), so a sweep and a
co-design of the same knob change the same hardware.
Method: alternate (1) the plan search at the current knob value and (2) a vectorized scan of the knob
over its range with the plan fixed (one vmapped call of the objective and its jax.grad, compiled
once), until the knob stops moving or the budget is spent; report the chosen value, the preset
value, what it bought, and d objective / d knob at the choice.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from .. import knobs
from ..config import ConfigError
from ..evaluate import evaluate_arrays
from ..hardware import System
from ..plan import to_arrays
from ..workload import RankingModel

PRICE_PER_GBPS_HOUR = 0.0025     # assumed: see the module docstring
KNOBS = ("nic_split", "scale_out_bw")


@dataclass(frozen=True)
class KnobRange:
    """A co-design knob: the knob (perfmodel.knobs) that sets it, the range the scan covers and
    the objective it is chosen for."""
    name: str
    setter: str          # the knob that reads and writes it, in the unit below
    unit: str
    lo: float
    hi: float
    log: bool
    metric: str


def knob_spec(name: str, system: System) -> KnobRange:
    if name == "nic_split":
        if not system.nic.serves_scale_up:
            raise ConfigError("", "co_design", f"nic_split needs a chip whose NICs carry scale-up too (e.g. "
                              f"mtia300, gaudi3); {system.chip.name}'s scale-up is a separate link")
        return KnobRange(name, "nic_scale_up_fraction", "fraction of NIC bandwidth on scale-up", 0.05, 0.95, False,
                         "step_s")
    if name == "scale_out_bw":
        return KnobRange(name, "scale_out_bandwidth_GBps", "GB/s per chip", 12.5, 800.0, True,
                         "usd_per_million_samples")
    raise ConfigError("", "co_design", f"is {name!r}; allowed: {', '.join(KNOBS)}")


def _setter(name: str):
    return knobs, knobs.knob({"nic_split": "nic_scale_up_fraction", "scale_out_bw": "scale_out_bandwidth_GBps"}[name])


def read_knob(name: str, system: System) -> float:
    K, kn = _setter(name)
    return float(kn.get(K.State(system, None, None)))


def set_knob(name: str, system: System, value) -> System:
    """The system with the knob at `value` (traceable: value may be a JAX scalar), set by the analysis
    knob a sweep of it uses; scale-out bandwidth is priced too (chip $/h + price x GB/s of it)."""
    K, kn = _setter(name)
    value = jnp.asarray(value, jnp.float32)
    out = kn.set(K.State(system, None, None), value).system
    if name == "scale_out_bw":
        before = K.scale_out_Bps(system) / 1e9
        chip = dataclasses.replace(out.chip, usd_per_hour=out.chip.usd_per_hour + PRICE_PER_GBPS_HOUR * (value - before))
        out = dataclasses.replace(out, chip=chip)
    return out


def _metric(bd, metric: str):
    return bd.step_s if metric == "step_s" else bd.usd_per_million_samples


def _knob_objective(v, name, metric, system, model, pa):
    bd = evaluate_arrays(set_knob(name, system, v), model, pa, 0.0)
    return _metric(bd, metric), bd.feasible


@functools.partial(jit, static_argnums=(0, 1), quick=True)
def _scan_jit(name, metric, system, model, pa, values):
    """Objective, feasibility and d objective / d knob of a fixed plan at each knob value: one
    vmapped call, compiled once per knob and problem shape (the system is an argument, not a constant)."""
    vg = jax.value_and_grad(_knob_objective, has_aux=True)
    (obj, feasible), grad = jax.vmap(lambda v: vg(v, name, metric, system, model, pa))(values)
    return obj, feasible, grad


def grid(name: str, system: System, points: int = 33) -> np.ndarray:
    """The knob values a scan visits: `points` over the knob's range (geometric for a log knob) and the
    system's own value."""
    spec = knob_spec(name, system)
    values = np.geomspace(spec.lo, spec.hi, points) if spec.log else np.linspace(spec.lo, spec.hi, points)
    return np.unique(np.append(values, read_knob(name, system)).astype(np.float32))


def scan(name: str, system: System, model: RankingModel, plan, points: int = 33):
    """A fixed plan over the knob's range: (values, objective, feasible, d objective / d knob)."""
    spec = knob_spec(name, system)
    values = grid(name, system, points)
    obj, feasible, grad = _scan_jit(name, spec.metric, system, model, to_arrays(plan, system, model),
                                    jnp.asarray(values))
    return values, np.asarray(obj, np.float64), np.asarray(feasible), np.asarray(grad, np.float64)


SEARCH_SHARE = 0.45    # of the budget (rounds and seconds), per plan search: the usual two and their scans fit


def co_design(name: str, system: System, model: RankingModel, plan_search, *, budget, iterations: int | None,
              rounds: int = 3, points: int = 33) -> dict:
    """Alternate plan search and knob scan within `iterations` rounds and the wall-clock `budget`
    (driver.Budget; None limits: none).

    `plan_search(system, budget_s, start, iterations) -> SearchResult` searches a plan at a knob
    value (start: the plan to refine, None for the search's own start). Each search gets
    SEARCH_SHARE of the iterations and of the seconds. The first is at the preset value; then scan
    the plan over the knob's range, move the knob to the scan's best value and search again from
    the plan (which is already better there than where it was found), until the knob stays (at most
    `rounds` moves), another search would pass the iterations, or less than half a search's seconds
    are left. Every (value, plan) pair scanned is a candidate; the best wins, the preset's on a tie,
    so the result is never worse than the plan searched at the preset value. 'improvement' is the
    chosen pair's against the preset's plan at the preset value: the knob and the later searches
    together; 'improvement_plan_fixed' what the knob alone buys that plan.
    """
    spec = knob_spec(name, system)
    preset = read_knob(name, system)
    per_s = None if budget.seconds is None else SEARCH_SHARE * budget.seconds
    per_n = None if iterations is None else max(int(SEARCH_SHARE * iterations), 1)
    found = plan_search(system, per_s, None, per_n)
    value, plan, used, stopped = preset, found.plan, found.iterations, found.stopped
    candidates, history, moves = [], [], 0   # candidates: (objective, value, plan, d objective / d knob)
    while True:
        values, obj, feasible, grad = scan(name, system, model, plan, points)
        here = int(np.argmin(np.abs(values - value)))       # the value the plan was searched at (on the grid)
        history.append((value, float(obj[here])))
        candidates.append((float(obj[here]), value, plan, float(grad[here])))
        masked = np.where(feasible, obj, np.inf)
        i = int(np.argmin(masked))
        if len(history) == 1:                   # what the knob alone buys, the preset's plan kept
            fixed = 1.0 - float(masked[i]) / float(obj[here]) if np.isfinite(masked[i]) else 0.0
        if not np.isfinite(masked[i]) or i == here:
            break
        candidates.append((float(obj[i]), float(values[i]), plan, float(grad[i])))
        if moves == rounds or (per_n is not None and used + per_n > iterations):
            break
        left_s = None if budget.seconds is None else budget.seconds - budget.elapsed()
        if left_s is not None and left_s < 0.5 * per_s:
            stopped = "budget_s"
            break
        value, moves = float(values[i]), moves + 1
        # a search that would leave less than half of another's seconds gets the rest
        share = None if per_s is None else (left_s if left_s < 1.5 * per_s else per_s)
        found = plan_search(set_knob(name, system, value), share, plan, per_n)
        plan, used = found.plan, used + found.iterations
        stopped = "budget_s" if "budget_s" in (stopped, found.stopped) else found.stopped
    obj_preset = candidates[0][0]
    final, value, plan, grad = min(candidates, key=lambda c: c[0])     # the first (the preset's) on a tie
    return {"knob": name, "unit": spec.unit, "metric": spec.metric, "preset": preset, "chosen": value,
            "objective_at_preset": obj_preset, "objective_at_chosen": final,
            "improvement": 1.0 - final / obj_preset, "improvement_plan_fixed": fixed,
            "d_objective_d_knob": grad, "history": history, "iterations": used, "stopped": stopped,
            "plan": plan, "system": set_knob(name, system, value) if value != preset else system}


def co_designed(system, model, method, knob, progress, k):
    """search's co_design: the plan searched (one.search_one) at each knob value co_design tries, a
    method that refines a plan (methods.Spec.refines) from the last value's; the result's system
    carries the chosen value."""
    from ..evaluate import evaluate
    from .driver import Budget
    from .methods import spec
    from .one import search_one
    from .progress import Progress
    from .result import SearchResult
    knob_spec(knob, system)
    refines, start = spec(method).refines, k.options.start
    budget = Budget(seconds=k.budget_s)

    def plan_search(sv, seconds, plan, iterations):
        opts = dataclasses.replace(k.options, start=plan if refines and plan is not None else start)
        return search_one(sv, model, method, dataclasses.replace(k, budget_s=seconds, iterations=iterations,
                                                                 options=opts))

    with Progress(progress, k.budget_s, k.iterations, f"search {method}, co-design {knob}"):
        info = co_design(knob, system, model, plan_search=plan_search, budget=budget, iterations=k.iterations)
    plan, sys_v = info.pop("plan"), info.pop("system")
    bd = evaluate(sys_v, model, plan)
    return SearchResult(method=method, plan=plan, breakdown=bd, step_s=float(bd.step_s),
                        samples_per_s=float(bd.samples_per_s), feasible=bool(bd.feasible), wall_s=budget.elapsed(),
                        seed=k.seed, converged=info["stopped"] != "budget_s", notes={"co_design": info},
                        system=sys_v, iterations=info["iterations"], stopped=info["stopped"])
