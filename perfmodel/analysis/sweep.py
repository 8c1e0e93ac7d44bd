"""sweep(system, model, vary): the model at every point of a grid (or paired list) of knob values, by
one jitted, vmapped evaluation over the flattened points (in chunks when there are many).

    table = pm.sweep(system, model, vary={"scale_out_bandwidth_GBps": np.linspace(25, 400, 16),
                                          "offload_engines": [0, 16]})

Grid: the cartesian product of the value lists, the first knob varying slowest. Paired: the lists
have one length and point i takes the i-th value of each. The plan is fixed (the base system's
default plan, or the one given) or re-optimized at every point (plan="replan": the `replan`
callable, `perfmodel.default_plan` unless given, runs per distinct hardware/workload point; plan
knobs then apply on top of its plan).

The result is a tidy table, one row per point: the knob columns (in the knobs' units), then
step_s, samples_per_s, exposed_comm_s, comm_busy_s, compute_busy_max_s, interference_max_s,
slowdown_max, mfu, memory_max_bytes, memory_capacity_bytes, host_memory_max_bytes, feasible,
usd_per_million_samples, joules_per_sample, scale_up_link_Bps and scale_out_link_Bps (effective,
after any PCIe cap) and <phase>_busy_max_s per phase (busy time without interference, max over
devices). A pandas DataFrame if pandas imports, else a dict of numpy columns.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..config import ConfigError
from ..evaluate import PHASES, Breakdown, evaluate, resolve
from ..hardware import System, link_bandwidths
from ..plan import Plan, PlanArrays, stack, to_arrays, validate_plan
from ..workload import RankingModel
from . import knobs as K
from .table import make_table

MAX_POINTS = 10_000_000

SUMMARY_UNITS = {
    "step_s": "s", "samples_per_s": "samples/s", "exposed_comm_s": "s", "comm_busy_s": "s",
    "compute_busy_max_s": "s", "interference_max_s": "s", "slowdown_max": "x", "mfu": "",
    "memory_max_bytes": "B", "memory_capacity_bytes": "B", "host_memory_max_bytes": "B", "feasible": "",
    "usd_per_million_samples": "$", "joules_per_sample": "J", "scale_up_link_Bps": "B/s",
    "scale_out_link_Bps": "B/s", **{f"{p}_busy_max_s": "s" for p in PHASES},
}


def summarize(bd: Breakdown, system: System) -> dict[str, jax.Array]:
    """The scalar figures of one evaluation (traceable; the columns of a sweep table)."""
    up, out = link_bandwidths(system)
    res = {
        "step_s": bd.step_s, "samples_per_s": bd.samples_per_s, "exposed_comm_s": bd.exposed_comm_s,
        "comm_busy_s": bd.comm_s, "compute_busy_max_s": jnp.max(bd.compute_s),
        "interference_max_s": jnp.max(bd.interference_s), "slowdown_max": jnp.max(bd.slowdown), "mfu": bd.mfu,
        "memory_max_bytes": jnp.max(bd.memory_bytes), "memory_capacity_bytes": bd.capacity_bytes,
        "host_memory_max_bytes": jnp.max(bd.host_memory_bytes), "feasible": bd.feasible,
        "usd_per_million_samples": bd.usd_per_million_samples, "joules_per_sample": bd.joules_per_sample,
        "scale_up_link_Bps": up + jnp.zeros(()), "scale_out_link_Bps": out + jnp.zeros(()),
    }
    for p in PHASES:
        res[f"{p}_busy_max_s"] = jnp.max(bd.phase_s[p])
    return res


# ------------------------------------------------------------------------------------- value specs

def parse_values(text: str, name: str = "") -> list:
    """Values of one knob from text: `a:b:n` (n points, linear), `a:b:n:log` (geometric), `x,y,z`
    (a list; names for a categorical knob), or one value. Integer knobs round a range to integers
    and drop repeats."""
    where = f"vary.{name}" if name else "vary"
    text = text.strip()
    if not text:
        raise ConfigError("", where, "needs values: a:b:n, a:b:n:log, or a comma-separated list")
    k = K.KNOBS.get(name)
    if ":" in text:
        parts = text.split(":")
        log = len(parts) == 4 and parts[3].strip() in ("log", "geom")
        lin = len(parts) == 4 and parts[3].strip() in ("lin", "linear")
        if len(parts) not in (3, 4) or (len(parts) == 4 and not (log or lin)):
            raise ConfigError("", where, f"range {text!r} must be start:stop:count or start:stop:count:log")
        try:
            a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
        except ValueError:
            raise ConfigError("", where, f"range {text!r} must be start:stop:count with numbers "
                              "(count an integer >= 1)") from None
        if not 1 <= n <= MAX_POINTS or not (math.isfinite(a) and math.isfinite(b)):
            raise ConfigError("", where, f"range {text!r}: count must be from 1 to {MAX_POINTS:,} and the ends "
                              "finite")
        if log and (a <= 0 or b <= 0):
            raise ConfigError("", where, f"range {text!r}: log spacing needs a start and stop > 0")
        vals = (np.geomspace(a, b, n) if log else np.linspace(a, b, n)).tolist()
        if k is not None and k.integer:
            vals = list(dict.fromkeys(round(v) for v in vals))
        return vals
    out = []
    for item in text.split(","):
        item = item.strip()
        try:
            v = float(item)
            out.append(int(v) if v.is_integer() and k is not None and k.integer else v)
        except ValueError:
            out.append(item)
    return out


def parse_vary(spec: str) -> tuple[str, list]:
    """`name=values` (see parse_values) -> (name, values); the knob name is checked."""
    if "=" not in spec:
        raise ConfigError("", "vary", f"{spec!r} must be NAME=VALUES, e.g. scale_out_bandwidth_GBps=25:400:16")
    name, text = spec.split("=", 1)
    name = name.strip()
    K.knob(name)
    return name, parse_values(text, name)


def _value_list(name: str, values) -> list:
    if isinstance(values, str):
        return parse_values(values, name)
    if np.ndim(values) == 0:
        return [values.item() if hasattr(values, "item") else values]
    vals = list(np.asarray(values).tolist()) if not isinstance(values, (list, tuple)) else list(values)
    if not vals:
        raise ConfigError("", f"vary.{name}", "has no values")
    return vals


def points(vary: Mapping[str, Sequence], paired: bool = False) -> tuple[list[str], np.ndarray, dict]:
    """(knob names as given, [N, K] encoded values, name -> user values per point) of a grid or pairing."""
    if not isinstance(vary, Mapping) or not vary:
        raise ConfigError("", "vary", "needs at least one knob, e.g. {'scale_out_bandwidth_GBps': [50, 100]}")
    names = list(vary)
    lists = {}
    for n in names:
        k = K.knob(n)
        vals = _value_list(n, vary[n])
        lists[n] = [k.encode(v) for v in vals]
    if paired:
        lengths = {n: len(v) for n, v in lists.items()}
        if len(set(lengths.values())) > 1:
            raise ConfigError("", "vary", "paired values need one length per knob, got "
                              + ", ".join(f"{n}: {l}" for n, l in lengths.items()))
        enc = np.asarray([lists[n] for n in names], np.float64).T
    else:
        total = math.prod(len(v) for v in lists.values())
        if total > MAX_POINTS:
            raise ConfigError("", "vary", f"the grid has {total:,} points; at most {MAX_POINTS:,}")
        enc = np.asarray(list(itertools.product(*(lists[n] for n in names))), np.float64).reshape(-1, len(names))
    user = {n: [K.knob(n).decode(x) for x in enc[:, j]] for j, n in enumerate(names)}
    return names, enc, user


# ------------------------------------------------------------------------------------- evaluation

@jit(static_argnames=("names", "batched_plan"))
def _run(system, model, plan, values, names, batched_plan):
    def one(v, p):
        st = K.apply(names, K.State(system, model, p), [v[i] for i in range(len(names))])
        return summarize(evaluate(st.system, st.model, st.plan), st.system)
    return jax.vmap(one, in_axes=(0, 0 if batched_plan else None))(values, plan)


def default_chunk(system: System, model: RankingModel) -> int:
    """Points per vmapped call: a power of two, fewer for bigger (tables x devices) problems."""
    size = max(model.tables.count * system.num_chips, 1)
    n = max(64, min(8192, 2 ** 21 // size))
    return 1 << (n.bit_length() - 1)


def _chunked(system, model, plan, values: np.ndarray, names: tuple, batched_plan: bool, chunk: int) -> dict:
    N = values.shape[0]
    size = min(chunk, max(16, 1 << max(N - 1, 0).bit_length()))   # few distinct shapes: few compiles
    outs = []
    for lo in range(0, N, size):
        hi = min(lo + size, N)
        idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), hi - 1)])   # pad: repeat the last
        p = jax.tree_util.tree_map(lambda x: x[idx], plan) if batched_plan else plan
        v = jnp.asarray(values[idx], jnp.float32)
        out = _run(system, model, p, v, names, batched_plan)
        outs.append({k: np.asarray(x)[: hi - lo] for k, x in out.items()})
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def _plan_arrays(plan, system, model) -> PlanArrays:
    plan = getattr(plan, "plan", plan)        # a search result (pm.search) carries its plan
    if isinstance(plan, PlanArrays):
        return plan
    if isinstance(plan, Plan):
        validate_plan(plan, system, model)
        return to_arrays(plan, system, model)
    raise ConfigError("", "plan", f"must be None, a Plan, PlanArrays, 'replan' or a callable; got {type(plan).__name__}")


def sweep(system: System, model: RankingModel, vary: Mapping[str, Sequence], plan=None, *,
          paired: bool = False, replan: Callable | None = None, chunk: int | None = None):
    """Evaluate `model` on `system` at every point of `vary` (knob name -> values); see the module doc.

    plan: None (the base system's default plan, fixed), a Plan or PlanArrays (fixed), "replan" (the
    `replan(system, model) -> Plan` callable at every point; default perfmodel.default_plan) or a
    callable (same as "replan" with it). A callable may also return what pm.search returns (an
    object whose .plan is the Plan), e.g. replan=lambda s, m: pm.search(s, m, budget_s=5). chunk: points per vmapped call (default by problem size).
    Bad knob names or values raise ConfigError naming the knob and what is allowed.
    """
    system, model, _ = resolve(system, model)      # preset names and paths work too
    names, enc, user = points(vary, paired)
    base = K.State(system, model, None)
    K.check_applies(names, base)
    order = K.order(names)
    perm = [names.index(n) for n in order]
    values = enc[:, perm]
    K.check_values(order, values, base._replace(plan=_dummy_plan(system, model)))
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise ConfigError("", "chunk", f"must be a positive integer, got {chunk!r}")
    chunk = chunk or default_chunk(system, model)

    if callable(plan) and not isinstance(plan, (Plan, PlanArrays)):
        plan, replan = "replan", plan
    if isinstance(plan, str):
        if plan != "replan":
            raise ConfigError("", "plan", f"must be None, a Plan, PlanArrays, 'replan' or a callable; got {plan!r}")
        pa, batched = _replanned(system, model, order, values, replan), True
        state = K.prepare(order, K.State(system, model, jax.tree_util.tree_map(lambda x: x[0], pa)))
        st_sys, st_model = state.system, state.model
    else:
        from ..search.greedy import default_plan
        pa = _plan_arrays(plan if plan is not None else default_plan(system, model), system, model)
        state = K.prepare(order, K.State(system, model, pa))
        st_sys, st_model, pa, batched = state.system, state.model, state.plan, False
    out = _chunked(st_sys, st_model, pa, values, tuple(order), batched, chunk)

    cols: dict[str, np.ndarray] = {}
    for n in names:
        k = K.knob(n)
        cols[n] = np.asarray(user[n], dtype=object if k.choices else (np.int64 if k.integer else np.float64))
    for key in SUMMARY_UNITS:
        v = out[key]
        cols[key] = v.astype(bool) if key == "feasible" else v.astype(np.float64)
    return make_table(cols)


def _replanned(system, model, order: list[str], values: np.ndarray, replan) -> PlanArrays:
    """Stacked plan arrays: replan(system_i, model_i) once per distinct hardware/workload point."""
    if replan is None:
        from ..search.greedy import default_plan as replan
    hw = [j for j, n in enumerate(order) if K.knob(n).kind != "plan"]
    hw_names = [order[j] for j in hw]
    cache: dict[tuple, PlanArrays] = {}
    plans = []
    for row in values:
        key = tuple(float(row[j]) for j in hw)
        if key not in cache:
            probe = K.State(system, model, _dummy_plan(system, model))
            st = K.prepare(hw_names, probe)
            st = K.apply(hw_names, st, [jnp.asarray(row[j], jnp.float32) for j in hw])
            p = replan(st.system, st.model)
            cache[key] = _plan_arrays(p, st.system, st.model)
        plans.append(cache[key])
    return stack(plans)


def _dummy_plan(system: System, model: RankingModel) -> PlanArrays:
    """A placeholder PlanArrays (all tables data-parallel) for knobs that touch only hardware/workload."""
    T, D, L = model.tables.count, system.num_chips, system.domain_size
    H = D // L
    z = lambda *s: jnp.zeros(s, jnp.float32)
    one = lambda n, i=0: jax.nn.one_hot(i, n)
    return PlanArrays(shard_type=jnp.tile(one(5), (T, 1)), placement=z(T, D) + 1.0 / D,
                      domain_placement=z(T, H) + 1.0 / H, cw_shards=z(T) + 1, cache_ratio=z(T) + 1,
                      dense_mode=one(3), algorithm=jnp.tile(one(4, 1), (4, 1)), a2a_precision=one(3),
                      grad_precision=one(3), offload=jnp.ones(()), pipeline=jnp.ones(()),
                      grad_buckets=jnp.ones(()), overlap_chunks=jnp.ones(()))
