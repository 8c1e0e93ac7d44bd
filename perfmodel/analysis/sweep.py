"""sweep(system, model, vary): the model at every point of a grid (or paired list) of knob values, by
one jitted, vmapped evaluation over the flattened points (in chunks when there are many).

    table = pm.sweep(system, model, vary={"scale_out_bandwidth_GBps": np.linspace(25, 400, 16),
                                          "offload_engines": [0, 16]})

Grid: the cartesian product of the value lists, the first knob varying slowest. Paired: the lists
have one length and point i takes the i-th value of each.

plan (planning.planner): "search" (the default) and "greedy" plan each distinct hardware/workload
point anew (plan knobs then apply on top of its plan); the searches run on an executor
(executors.py: a local process pool by default, Ray, or an Executor of the user's) and come back in
point order, so the same seed gives the same table on any executor with any number of workers. No
point's search starts from another's plan: a warm start along an axis would make a point's plan
depend on which points were swept with it. A fixed plan (a Plan, a plan file) is one vmapped call
over all points, its batch sharded over every JAX device.

A point whose plan cannot be made (the search fails, the model fits no plan there) keeps its row:
NaN figures, feasible False, and `error` saying why; the other points are unaffected.

uncertainty=N adds error bars (perfmodel.uncertainty): every point is evaluated at the same N draws
of the files' uncertain inputs (common random numbers, so two points compare draw by draw), each at
the point's plan, with the model's own error (one draw per draw index: one system). A draw sets the
system's and model's leaves first and the point's knobs after, so a swept knob is the value chosen
and overrides the draw of the leaf it sets. The columns UNCERTAIN_COLUMNS then get `<col>_p10`,
`<col>_p50` and `<col>_p90` beside the nominal one (the files' values, no model error).

The result is a tidy table, one row per point: the knob columns (in the knobs' units), then the
COLUMNS below in human units (step_ms, samples_per_s, memory_max_GB, scale_out_link_GBps, ...:
the unit is in the name; link bandwidths are effective, after any PCIe cap; <phase>_busy_max_ms is
a phase's busy time without interference, max over devices), then `plan` (the planner's label)
and `error` ("" where the point was evaluated). A pandas DataFrame if pandas imports, else a dict
of numpy columns.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..config import ConfigError
from ..evaluate import PHASES, evaluate, resolve
from ..hardware import System
from ..plan import stack, stand_in, to_arrays, validate_plan
from ..report import summarize
from ..workload import RankingModel
from .. import knobs as K
from .leaves import elasticities
from .planning import progress_text
from .table import make_table

MAX_POINTS = 10_000_000
# the columns uncertainty= gives p10 / p50 / p90 of: the ones the model's error scales
UNCERTAIN_COLUMNS = ("step_ms", "samples_per_s", "usd_per_million_samples", "joules_per_sample")

# table column -> (summarize's key, factor from SI): the units a user reads, in the name
COLUMNS = {
    "step_ms": ("step_s", 1e3), "samples_per_s": ("samples_per_s", 1.0), "exposed_comm_ms": ("exposed_comm_s", 1e3),
    "comm_busy_ms": ("comm_busy_s", 1e3), "compute_busy_max_ms": ("compute_busy_max_s", 1e3),
    "interference_max_ms": ("interference_max_s", 1e3), "slowdown_max": ("slowdown_max", 1.0), "mfu": ("mfu", 1.0),
    "memory_max_GB": ("memory_max_bytes", 1e-9), "memory_capacity_GB": ("memory_capacity_bytes", 1e-9),
    "host_memory_max_GB": ("host_memory_max_bytes", 1e-9), "feasible": ("feasible", 1.0),
    "usd_per_million_samples": ("usd_per_million_samples", 1.0), "joules_per_sample": ("joules_per_sample", 1.0),
    "scale_up_link_GBps": ("scale_up_link_Bps", 1e-9), "scale_out_link_GBps": ("scale_out_link_Bps", 1e-9),
    **{f"{p}_busy_max_ms": (f"{p}_busy_max_s", 1e3) for p in PHASES},
}


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

def _program(system, model, plan, values, names, batched_plan):
    def one(v, p):
        st = K.apply(names, K.State(system, model, p), [v[i] for i in range(len(names))])
        return summarize(evaluate(st.system, st.model, st.plan), st.system)
    return jax.vmap(one, in_axes=(0, 0 if batched_plan else None))(values, plan)


# A sweep of a few chunks spends most of its time compiling: it compiles quick (MLPerf on h100-64:
# 1.2 s against 2.7 s, while a chunk runs 0.1 s against 0.02 s), a longer one for speed. The same
# points give the same program, so the same figures.
QUICK_CHUNKS = 8
_run = jit(_program, static_argnames=("names", "batched_plan"))
_run_quick = jit(_program, static_argnames=("names", "batched_plan"), quick=True)


def default_chunk(system: System, model: RankingModel) -> int:
    """Points per vmapped call: a power of two, fewer for bigger (tables x devices) problems."""
    size = max(model.tables.count * system.num_chips, 1)
    n = max(64, min(8192, 2 ** 21 // size))
    return 1 << (n.bit_length() - 1)


def _mesh():
    """A 1-D mesh over every JAX device (None on one device): a sweep's points are split over it."""
    devices = jax.devices()
    return jax.sharding.Mesh(np.asarray(devices), ("points",)) if len(devices) > 1 else None


def _chunked(system, model, plan, values: np.ndarray, names: tuple, batched_plan: bool, chunk: int) -> dict:
    N = values.shape[0]
    mesh = _mesh()
    ndev = 1 if mesh is None else mesh.size
    size = min(chunk, max(16, 1 << max(N - 1, 0).bit_length()))   # few distinct shapes: few compiles
    size = -(-size // ndev) * ndev                                 # whole shards per device
    put = (lambda x: x) if mesh is None else (
        lambda x: jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("points"))))
    chunks = -(-N // size)
    run = _run_quick if chunks <= QUICK_CHUNKS else _run
    outs = []
    with _bar(N, chunks, size) as bar:
        for lo in range(0, N, size):
            hi = min(lo + size, N)
            idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), hi - 1)])   # pad: repeat the last
            p = jax.tree_util.tree_map(lambda x: put(x[idx]), plan) if batched_plan else plan
            v = put(jnp.asarray(values[idx], jnp.float32))
            out = run(system, model, p, v, names, batched_plan)
            outs.append({k: np.asarray(x)[: hi - lo] for k, x in out.items()})
            bar.update(hi - lo)
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def _bar(points: int, chunks: int, size: int):
    """A grid of more than QUICK_CHUNKS chunks takes seconds to minutes (10^6 points: minutes): stderr
    says its size up front, and a bar counts the points with the time left. Smaller grids stay silent."""
    from ..report import announced_bar
    line = (f"sweep: evaluating {points:,} points in {chunks:,} vectorized calls of {size:,} (the first compiles)"
            if chunks > QUICK_CHUNKS else None)
    return announced_bar(line, points, "point", unit_scale=True)


# ------------------------------------------------------------------------------------- uncertainty

def _drawn_program(system, model, plan, values, draws, names, batched_plan, spec, figures):
    """summarize's `figures` at (point, draw) pairs: the draw's inputs set on the leaves
    (propagate._set), then the point's knobs, so a swept knob overrides the draw of the leaf it sets."""
    from ..uncertainty.propagate import set_leaves
    flat, tree = jax.tree_util.tree_flatten((system, model))

    def one(v, d, p):
        s, m = jax.tree_util.tree_unflatten(tree, set_leaves(flat, spec, d))
        st = K.apply(names, K.State(s, m, p), [v[i] for i in range(len(names))])
        figs = summarize(evaluate(st.system, st.model, st.plan), st.system)
        return {k: figs[k] for k in figures}          # only what the intervals read: XLA drops the rest
    return jax.vmap(one, in_axes=(0, 0, 0 if batched_plan else None))(values, draws, plan)


_STATIC = ("names", "batched_plan", "spec", "figures")
_run_drawn = jit(_drawn_program, static_argnames=_STATIC)
_run_drawn_quick = jit(_drawn_program, static_argnames=_STATIC, quick=True)


def _check_uncertainty(draws, seed, points: int) -> tuple[int, int]:
    """(draws, seed) checked, and points x draws within MAX_POINTS evaluations (the bound a grid has)."""
    from ..uncertainty.propagate import check_draws, check_seed
    draws, seed = check_draws(draws, "uncertainty"), check_seed(seed, "uncertainty_seed")
    if points * draws > MAX_POINTS:
        raise ConfigError("", "uncertainty", f"{draws:,} draws at {points:,} points are {points * draws:,} "
                          f"evaluations; at most {MAX_POINTS:,}: fewer draws or points")
    return draws, seed


def drawn_quantiles(system, model, plan, values: np.ndarray, names: tuple, batched_plan: bool, chunk: int,
                    inputs: list, u: np.ndarray, eps: np.ndarray, figures=("step_s",)) -> dict[str, np.ndarray]:
    """figure -> [P, 3] (p10, p50, p90 over the N draws) of each of the P points of `values`: the
    draws `u` [N, d] of `inputs` (their design quantiles) applied to the leaves of (system, model)
    before the point's knobs, the model's log error `eps` [N] on top.

    The (point, draw) pairs run point-major in vmapped chunks of `chunk` pairs, and a point's
    quantiles are taken as soon as its last draw is in, so memory stays at a chunk plus one point's
    draws whatever P x N is."""
    from ..uncertainty.inputs import as_applied, leaf_spec
    from ..uncertainty.propagate import QUANTILES, values_of, with_model_error
    from ..report import announced_bar
    P, N = values.shape[0], u.shape[0]
    spec = leaf_spec(inputs, system, model)
    applied = as_applied(inputs, values_of(inputs, u))
    total = P * N
    mesh = _mesh()
    ndev = 1 if mesh is None else mesh.size
    size = min(chunk, max(16, 1 << max(total - 1, 0).bit_length()))
    size = -(-size // ndev) * ndev
    put = (lambda x: x) if mesh is None else (
        lambda x: jax.device_put(x, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("points"))))
    chunks = -(-total // size)
    run = _run_drawn_quick if chunks <= QUICK_CHUNKS else _run_drawn
    line = (f"sweep: {N:,} draws at each of {P:,} points: {total:,} evaluations in {chunks:,} vectorized calls of "
            f"{size:,} (the first compiles)" if chunks > QUICK_CHUNKS else None)
    out = {f: np.full((P, len(QUANTILES)), np.nan) for f in figures}
    pending = {f: [] for f in figures}          # the draws of points not yet complete, in pair order
    done = 0                                    # points whose quantiles are in `out`
    with announced_bar(line, total, "evaluation", unit_scale=True) as bar:
        for lo in range(0, total, size):
            hi = min(lo + size, total)
            idx = np.concatenate([np.arange(lo, hi), np.full(size - (hi - lo), hi - 1)])   # pad: repeat the last
            pt, dr = idx // N, idx % N
            p = jax.tree_util.tree_map(lambda x: put(x[pt]), plan) if batched_plan else plan
            res = run(system, model, p, put(jnp.asarray(values[pt], jnp.float32)),
                      put(jnp.asarray(applied[dr], jnp.float32)), names, batched_plan, spec, tuple(figures))
            res = with_model_error({f: np.asarray(res[f], np.float64)[: hi - lo] for f in figures}, eps[dr[: hi - lo]])
            for f in figures:
                pending[f].append(res[f])
            complete = hi // N                  # points whose every draw has run
            if complete > done:
                for f in figures:
                    buf = np.concatenate(pending[f])
                    k = (complete - done) * N
                    x = buf[:k].reshape(complete - done, N)
                    x = np.where(np.isfinite(x), x, np.nan)       # as propagate.quantiles: the finite draws
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)      # a point with no finite draw: NaN
                        out[f][done:complete] = np.nanquantile(x, QUANTILES, axis=1).T
                    pending[f] = [buf[k:]]
                done = complete
            bar.update(hi - lo)
    return out


def sweep(system: System, model: RankingModel, vary: Mapping[str, Sequence], plan="search", *,
          paired: bool = False, iterations: int | None = None, seed: int = 0, executor=None,
          workers: int | None = None, ray_address: str | None = None, chunk: int | None = None,
          binding: bool = False, uncertainty: int | None = None, uncertainty_seed: int = 0, model_error=True):
    """Evaluate `model` on `system` at every point of `vary` (knob name -> values); see the module doc.

    plan, iterations, seed: as planning.planner ("search" with STUDY_ITERATIONS rounds by default,
    "greedy", a Plan, a plan file, a callable (system, model) -> Plan). executor, workers,
    ray_address: where per-point searches run (executors.run; a process pool of $PERFMODEL_WORKERS,
    else the cores, by default; greedy and single-point sweeps run here). chunk: points per vmapped
    call (default by problem size). binding: add the columns `binding`, the resource that bounds the
    point's step (binding_of), and `binding_elasticity`; one gradient per point, so at most
    MAX_BINDING_POINTS points. uncertainty: a number of draws (2 to uncertainty.MAX_DRAWS) of the
    files' uncertain inputs, each point evaluated at the same draws (seeded by uncertainty_seed),
    with the model's own error unless model_error=False (a ModelError: that one); adds
    `<col>_p10`, `<col>_p50`, `<col>_p90` of UNCERTAIN_COLUMNS (the module doc).
    Bad knob names or values, or a fixed plan that does not fit `system`, raise ConfigError naming
    what is wrong and what is allowed.
    """
    from . import executors
    from .planning import planner as make_planner

    system, model, _ = resolve(system, model)      # preset names and paths work too
    make = make_planner(plan, iterations=iterations, seed=seed)
    executors.check_executor(executor)
    executors.check_workers(workers)
    names, enc, user = points(vary, paired)
    base = K.State(system, model, None)
    K.check_applies(names, base)
    order = K.order(names)
    perm = [names.index(n) for n in order]
    values = enc[:, perm]
    K.check_values(order, values, base._replace(plan=to_arrays(stand_in(system, model), system, model)))
    if binding and len(values) > MAX_BINDING_POINTS:
        raise ConfigError("", "binding", f"takes one gradient per point, at most {MAX_BINDING_POINTS:,} points; "
                          f"this sweep has {len(values):,}")
    if chunk is not None and (not isinstance(chunk, int) or chunk < 1):
        raise ConfigError("", "chunk", f"must be a positive integer, got {chunk!r}")
    chunk = chunk or default_chunk(system, model)
    if uncertainty is not None:                    # checked before any point is planned
        from ..uncertainty.propagate import model_error_of
        draws, useed = _check_uncertainty(uncertainty, uncertainty_seed, len(values))
        me = model_error_of(model_error)

    errors = np.full(len(values), "", dtype=object)
    if make.per_point:
        if make.kind != "search" and executor is None and ray_address is None:
            executor = "serial"              # greedy (and a user's callable) take well under a process start
        pa, errors = _replanned(system, model, order, values, make, executor, workers, ray_address)
        state = K.prepare(order, K.State(system, model, jax.tree_util.tree_map(lambda x: x[0], pa)))
        st_sys, st_model, batched = state.system, state.model, True
    else:
        pa = to_arrays(make(system, model), system, model)
        state = K.prepare(order, K.State(system, model, pa))
        st_sys, st_model, pa, batched = state.system, state.model, state.plan, False
    out = _chunked(st_sys, st_model, pa, values, tuple(order), batched, chunk)

    cols: dict[str, np.ndarray] = {}
    for n in names:
        k = K.knob(n)
        cols[n] = np.asarray(user[n], dtype=object if k.choices else (np.int64 if k.integer else np.float64))
    failed = errors != ""
    for col, (key, factor) in COLUMNS.items():
        v = out[key]
        if key == "feasible":
            cols[col] = v.astype(bool) & ~failed
        else:
            cols[col] = np.where(failed, np.nan, v.astype(np.float64) * factor)
    if binding:
        found = [binding_of(*_point_state(st_sys, st_model, pa, batched, tuple(order), values[i], i))
                 if not failed[i] else ("", np.nan) for i in range(len(values))]
        cols["binding"] = np.asarray([b for b, _ in found], dtype=object)
        cols["binding_elasticity"] = np.asarray([e for _, e in found], np.float64)
    if uncertainty is not None:
        from ..uncertainty.inputs import inputs_of
        from ..uncertainty.propagate import QUANTILES, design
        inputs = inputs_of(system, model)
        u = design(draws, len(inputs) + 1, useed)          # the inputs' columns, then the model error's
        eps = me.eps(u[:, len(inputs)])
        figs = {COLUMNS[c][0]: c for c in UNCERTAIN_COLUMNS}
        q = drawn_quantiles(st_sys, st_model, pa, values, tuple(order), batched, chunk, inputs,
                            u[:, :len(inputs)], eps, tuple(figs))
        for key, col in figs.items():
            for j, qj in enumerate(QUANTILES):
                cols[f"{col}_p{round(qj * 100)}"] = np.where(failed, np.nan, q[key][:, j] * COLUMNS[col][1])
    cols["plan"] = np.full(len(values), make.label, dtype=object)
    cols["error"] = errors
    return make_table(cols)


MAX_BINDING_POINTS = 10_000

# The resources a step can be bound by, each the System leaves that size it: a resource's elasticity
# is the largest |d log step / d log x| among them (efficiencies and bandwidths of one resource enter
# as a product, so their elasticities are equal, not additive)
RESOURCES = {
    "compute": ("chip.peak_bf16_flops", "chip.peak_fp8_flops", "chip.peak_fp32_flops", "chip.matmul_eff_max"),
    "HBM": ("chip.hbm_Bps", "chip.hbm_eff", "chip.gather_eff_max", "chip.llc_Bps"),
    "scale-up links": ("chip.scale_up_Bps", "chip.scale_up_eff", "chip.nvls_eff"),
    "NIC": ("nic.port_Bps", "nic.bandwidth_eff", "nic.active_ports"),
    "PCIe cap": ("nic.pcie_Bps",),
    "host memory": ("chip.host_link_Bps",),
    "latency": ("nic.latency_s", "nic.per_message_s", "nic.chunk_s", "nic.pcie_latency_s", "chip.scale_up_latency_s",
                "chip.core_call_s", "offload.setup_s", "levels[].latency_s"),
    "launch and host": ("chip.launch_s", "chip.host_step_s"),
}


def _point_state(system, model, pa, batched: bool, names: tuple, row, i: int):
    """(system, model, plan) at sweep point i, as _program evaluates it: its plan, every knob applied."""
    plan = jax.tree_util.tree_map(lambda x: x[i], pa) if batched else pa
    v = jnp.asarray(row, jnp.float32)
    st = K.apply(names, K.State(system, model, plan), [v[j] for j in range(len(names))])
    return st.system, st.model, st.plan


def binding_of(system: System, model: RankingModel, plan) -> tuple[str, float]:
    """(the resource that bounds the step, its elasticity): of RESOURCES, the one whose leaves move the
    step most, |d log step / d log x| at this plan (the plan held: what a 1 % faster resource buys
    before any re-planning). "NIC" is the scale-out network (and scale-up where the NIC carries it)."""
    el = {}
    for path, *_, e in elasticities(system, model, plan, "step_s")[1]:
        key = "levels[]." + path.rsplit(".", 1)[-1] if path.startswith("levels[") else path
        el[key] = max(el.get(key, 0.0), abs(e))
    best = max(RESOURCES, key=lambda r: max((el.get(p, 0.0) for p in RESOURCES[r]), default=0.0))
    return best, max(el.get(p, 0.0) for p in RESOURCES[best])


def _plan_point(make, system, model, hw_names: list[str], row: list[float]):
    """(plan arrays, "") for one hardware/workload point, or (None, why) if its plan cannot be made.
    A module-level function of picklable arguments: it runs in worker processes and Ray tasks."""
    try:
        st = K.prepare(hw_names, K.State(system, model, to_arrays(stand_in(system, model), system, model)))
        st = K.apply(hw_names, st, [jnp.asarray(v, jnp.float32) for v in row])
        plan = make(st.system, st.model)
        validate_plan(plan, st.system, st.model)
        return jax.tree_util.tree_map(np.asarray, to_arrays(plan, st.system, st.model)), ""
    except Exception as err:                       # noqa: BLE001 - the row says why; the others go on
        return None, f"{type(err).__name__}: {err}" if not isinstance(err, ConfigError) else str(err)


def _replanned(system, model, order: list[str], values: np.ndarray, make, executor, workers, ray_address):
    """(stacked plan arrays, error text per point): make(system_i, model_i) once per distinct
    hardware/workload point, on the executor; a failed point gets another point's plan as a
    placeholder (its figures are masked) and its error."""
    from . import executors
    hw = [j for j, n in enumerate(order) if K.knob(n).kind != "plan"]
    hw_names = [order[j] for j in hw]
    keys = [tuple(float(row[j]) for j in hw) for row in values]
    distinct = list(dict.fromkeys(keys))
    results = executors.run(_plan_point, [(make, system, model, hw_names, list(k)) for k in distinct],
                            executor, workers, ray_address, progress=progress_text(make))
    found = dict(zip(distinct, results))
    ok = [r[0] for r in results if r[0] is not None]
    spare = ok[0] if ok else to_arrays(stand_in(system, model), system, model)
    plans = [found[k][0] if found[k][0] is not None else spare for k in keys]
    errors = np.asarray([found[k][1] for k in keys], dtype=object)
    return stack(plans), errors
