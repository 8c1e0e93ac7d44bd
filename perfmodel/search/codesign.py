"""Co-design: search a continuous hardware knob together with the plan.

Knobs
  nic_split      share of the NIC bandwidth on scale-up, on chips whose NICs carry both (MTIA 300,
                 Gaudi 3); objective: step time
  scale_out_bw   scale-out bandwidth per chip (bytes/s), priced: chip $/h + price x GB/s
                 (assumed 0.0025 $ per GB/s-hour: a 400 Gb/s NIC and switch port, ~3,000 $,
                 amortized over 3 years); objective: cost per sample
Method: alternate (1) the plan search at the current knob value and (2) a vectorized scan of the knob
over its range with the plan fixed (one vmapped call), until the knob stops moving; report the
chosen value, the preset value, what it bought, and d objective / d knob at the choice (jax.grad).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..config import ConfigError
from ..evaluate import _evaluate
from ..hardware import System, link_bandwidths
from ..plan import to_arrays
from ..workload import RankingModel

PRICE_PER_GBPS_HOUR = 0.0025     # assumed: see the module docstring
KNOBS = ("nic_split", "scale_out_bw")


@dataclass(frozen=True)
class Knob:
    name: str
    unit: str
    lo: float
    hi: float
    log: bool
    metric: str


def knob_spec(name: str, system: System) -> Knob:
    if name == "nic_split":
        if not system.nic.serves_scale_up:
            raise ConfigError("", "co_design", f"nic_split needs a chip whose NICs carry scale-up too (e.g. "
                              f"mtia300, gaudi3); {system.chip.name}'s scale-up is a separate link")
        return Knob(name, "fraction of NIC bandwidth on scale-up", 0.05, 0.95, False, "step_s")
    if name == "scale_out_bw":
        return Knob(name, "GB/s per chip", 12.5, 800.0, True, "usd_per_million_samples")
    raise ConfigError("", "co_design", f"is {name!r}; allowed: {', '.join(KNOBS)}")


def read_knob(name: str, system: System) -> float:
    if name == "nic_split":
        return float(system.nic.scale_up_fraction)
    return float(link_bandwidths(system)[1]) / 1e9


def set_knob(name: str, system: System, value) -> System:
    """The system with the knob at `value` (traceable: value may be a JAX scalar)."""
    nic = system.nic
    if name == "nic_split":
        return dataclasses.replace(system, nic=dataclasses.replace(nic, scale_up_fraction=jnp.asarray(value, jnp.float32)))
    # scale-out bandwidth per chip, scale-up kept; the NIC is re-sized, the PCIe cap lifted to match
    bw = jnp.asarray(value, jnp.float32) * 1e9
    up, _ = link_bandwidths(system)
    if nic.serves_scale_up:
        total = up + bw
        nic = dataclasses.replace(nic, scale_up_fraction=up / total, port_Bps=total / nic.active_ports,
                                  pcie_Bps=jnp.maximum(nic.pcie_Bps, total))
    else:
        nic = dataclasses.replace(nic, port_Bps=bw / nic.active_ports, pcie_Bps=jnp.maximum(nic.pcie_Bps, bw))
    base_usd = system.chip.usd_per_hour - PRICE_PER_GBPS_HOUR * read_knob(name, system)
    chip = dataclasses.replace(system.chip, usd_per_hour=base_usd + PRICE_PER_GBPS_HOUR * bw / 1e9)
    return dataclasses.replace(system, nic=nic, chip=chip)


def _metric(bd, metric: str):
    return bd.step_s if metric == "step_s" else bd.usd_per_million_samples


def scan(name: str, system: System, model: RankingModel, plan, points: int = 33):
    """Objective of a fixed plan over the knob's range: (values, objective, feasible)."""
    spec = knob_spec(name, system)
    values = np.geomspace(spec.lo, spec.hi, points) if spec.log else np.linspace(spec.lo, spec.hi, points)
    pa = to_arrays(plan, system, model)
    def one(v):
        bd = _evaluate(set_knob(name, system, v), model, pa, 0.0)
        return _metric(bd, spec.metric), bd.feasible
    obj, feas = jit(jax.vmap(one))(jnp.asarray(values, jnp.float32))
    return values, np.asarray(obj), np.asarray(feas)


def co_design(name: str, system: System, model: RankingModel, plan_search, rounds: int = 3) -> dict:
    """Alternate plan search and knob scan. `plan_search(system) -> (plan, ...)` returns a plan."""
    spec = knob_spec(name, system)
    preset = read_knob(name, system)
    plan0 = plan_search(system)
    pa0 = to_arrays(plan0, system, model)
    obj_preset = float(_metric(_evaluate(system, model, pa0, 0.0), spec.metric))
    value, plan, sys_v = preset, plan0, system
    history = [(preset, obj_preset)]
    for _ in range(rounds):
        values, obj, feas = scan(name, system, model, plan)
        obj = np.where(feas, obj, np.inf)
        best = float(values[int(np.argmin(obj))])
        sys_v = set_knob(name, system, best)
        plan = plan_search(sys_v)
        o = float(_metric(_evaluate(sys_v, model, to_arrays(plan, sys_v, model), 0.0), spec.metric))
        history.append((best, o))
        if abs(best - value) <= 1e-6 * max(abs(value), 1.0):
            value = best
            break
        value = best
    # keep the better of the preset and the chosen value (the scan is on a grid)
    if history[-1][1] > obj_preset:
        value, plan, sys_v = preset, plan0, system
    final = float(_metric(_evaluate(sys_v, model, to_arrays(plan, sys_v, model), 0.0), spec.metric))
    pa = to_arrays(plan, sys_v, model)
    grad = float(jax.grad(lambda v: _metric(_evaluate(set_knob(name, system, v), model, pa, 0.0), spec.metric))(
        jnp.float32(value)))
    return {"knob": name, "unit": spec.unit, "metric": spec.metric, "preset": preset, "chosen": value,
            "objective_at_preset": obj_preset, "objective_at_chosen": final,
            "improvement": 1.0 - final / obj_preset, "d_objective_d_knob": grad, "history": history,
            "plan": plan, "system": sys_v}
