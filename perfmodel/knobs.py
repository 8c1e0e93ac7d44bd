"""Knobs: named, unit-carrying parameters of the hardware, the workload and the plan that a sweep
(or a user) can set, each a pure function (system, model, plan arrays) -> (system, model, plan arrays).

A knob's value is in the unit its name says (`scale_out_bandwidth_GBps` in 10^9 bytes/s,
`pcie_latency_us` in microseconds); the setter converts to SI. Setters are plain jnp code, so a
sweep runs them inside one `jit(vmap(...))`. Derived quantities are set so that what the name says
changes and nothing else does:

  scale_out_bandwidth_GBps   on a NIC that also carries scale-up (MTIA 300, Gaudi 3: serves_scale_up)
                             the scale-up bandwidth stays fixed: total' = up + out', f' = up / total'
                             (ports stay, the port bandwidth becomes total' / active ports)
  scale_up_bandwidth_GBps    the same with the roles swapped; on a chip with a dedicated scale-up link
                             (NVLink) it is that link's bandwidth
  nic_bandwidth_GBps         the NIC's total bandwidth, the split f kept
  nic_scale_up_fraction      the split f, the total kept (only on a NIC that serves scale-up)

All NIC bandwidths are nominal: behind PCIe (nic_attach_pcie = 1) the NIC's traffic stays capped by
the PCIe link, B_eff = B_nic min(1, B_pcie / B_nic) (hardware.link_bandwidths); the sweep's
`scale_out_link_Bps` column shows the effective value.

Knobs are applied hardware first, then workload, then plan, each group in the order given, so a
plan knob always wins over what a hardware knob implies for the plan (see offload_engines).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .config import ConfigError, preset_path, read_file
from .hardware import System, parse_chip
from .schema import CHIP, GBPS, MODEL, MODEL_LEAVES, SYSTEM, SYSTEM_LEAVES, US, Field
from .plan import ALGORITHMS, ALLOWED_ALGORITHMS, DENSE_MODES, PRECISIONS, PlanArrays
from .workload import RankingModel

KINDS = ("hardware", "workload", "plan")


class State(NamedTuple):
    """What knobs act on: a System, a RankingModel and PlanArrays."""

    system: System
    model: RankingModel
    plan: PlanArrays


@dataclass(frozen=True)
class Knob:
    """One named parameter. `get` reads it (user units, concrete), `set` writes it (traceable)."""

    name: str
    kind: str                              # "hardware" | "workload" | "plan"
    unit: str                              # the unit of its values, for axis labels ("GB/s", "us", "")
    doc: str
    get: Callable[[State], object]
    set: Callable[[State, jax.Array], State]
    lo: float = 0.0                        # bounds, inclusive, in the knob's unit (the schema's, where it
    hi: float = math.inf                   # sets one field; a sweep also checks what it derives: check_values)
    integer: bool = False
    choices: tuple[str, ...] | None = None           # categorical: values are these names
    applies: Callable[[State], str | None] | None = None   # None if it applies, else why not
    prepare: Callable[[State], State] | None = None  # concrete, once before a sweep
    leaves: tuple[str, ...] = ()           # the System leaves it sweeps ("nic.port_Bps"; a level's by its
                                           # link, "levels[scale_out].latency_s"), for the sensitivity table

    def allowed(self) -> str:
        if self.choices:
            return "one of " + ", ".join(self.choices)
        hi = "" if math.isinf(self.hi) else f" and <= {self.hi:g}"
        unit = f" ({self.unit})" if self.unit else ""
        return f"{'an integer' if self.integer else 'a number'} >= {self.lo:g}{hi}{unit}"

    def label(self) -> str:
        """Axis label: the name with its unit."""
        return f"{self.name} [{self.unit}]" if self.unit else self.name

    def encode(self, value) -> float:
        """A user value as the float the setter takes (a categorical's index); ConfigError if bad."""
        where = f"vary.{self.name}"
        if self.choices:
            if isinstance(value, str) and value in self.choices:
                return float(self.choices.index(value))
            raise ConfigError("", where, f"value {value!r} is not allowed; allowed: {self.allowed()}")
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ConfigError("", where, f"value {value!r} is not a number; allowed: {self.allowed()}") from None
        v = float(value)
        bad = not math.isfinite(v) or v < self.lo or v > self.hi or (self.integer and v != round(v))
        if bad:
            raise ConfigError("", where, f"value {value!r} is out of range; allowed: {self.allowed()}")
        return v

    def decode(self, x: float):
        """The float a setter takes back to the user value."""
        if self.choices:
            return self.choices[int(round(x))]
        return int(round(x)) if self.integer else float(x)


# --------------------------------------------------------------------------------------- helpers

def _rep(obj, **kw):
    return dataclasses.replace(obj, **kw)


def _f(x):
    return jnp.asarray(x, jnp.float32)


def _sys(st: State, **kw) -> State:
    return st._replace(system=_rep(st.system, **kw))


def _chip(st: State, **kw) -> State:
    return _sys(st, chip=_rep(st.system.chip, **kw))


def _nic(st: State, **kw) -> State:
    return _sys(st, nic=_rep(st.system.nic, **kw))


def _off(st: State, **kw) -> State:
    return _sys(st, offload=_rep(st.system.offload, **kw))


def _levels(st: State, link: str, **kw) -> State:
    lv = tuple(_rep(l, **kw) if l.link == link else l for l in st.system.levels)
    return _sys(st, levels=lv)


def _level_value(st: State, link: str, attr: str):
    vals = [float(getattr(l, attr)) for l in st.system.levels if l.link == link]
    return vals[0] if vals else float("nan")


def _needs_level(link: str):
    def check(st: State):
        if not any(l.link == link for l in st.system.levels):
            return f"system {st.system.name} has no {link} network level"
        return None
    return check


def _nic_total(st: State):
    n = st.system.nic
    return n.active_ports * n.port_Bps


def _shared(st: State) -> bool:
    return bool(st.system.nic.serves_scale_up)


def scale_out_Bps(system: System):
    """The NIC's nominal scale-out bandwidth per chip (its ports, less the scale-up share on a NIC that
    carries both; a PCIe cap in front of it is not counted): traceable."""
    tot = system.nic.active_ports * system.nic.port_Bps
    return (1.0 - system.nic.scale_up_fraction) * tot if system.nic.serves_scale_up else tot


def _get_out(st: State):
    return float(scale_out_Bps(st.system)) / GBPS


def _set_out(st: State, v):
    out = v * GBPS
    nic = st.system.nic
    if not _shared(st):
        return _nic(st, port_Bps=out / nic.active_ports)
    up = nic.scale_up_fraction * _nic_total(st)
    total = up + out
    return _nic(st, port_Bps=total / nic.active_ports, scale_up_fraction=up / total)


def _get_up(st: State):
    if _shared(st):
        return float(st.system.nic.scale_up_fraction * _nic_total(st)) / GBPS
    return float(st.system.chip.scale_up_Bps) / GBPS


def _set_up(st: State, v):
    up = v * GBPS
    nic = st.system.nic
    if not _shared(st):
        return _chip(st, scale_up_Bps=up)
    out = (1.0 - nic.scale_up_fraction) * _nic_total(st)
    total = up + out
    return _nic(st, port_Bps=total / nic.active_ports, scale_up_fraction=up / total)


def _only_shared(st: State):
    if not _shared(st):
        return (f"the NIC of {st.system.chip.name} does not carry scale-up traffic (serves_scale_up = false); "
                "this knob applies to chips such as mtia300 and gaudi3")
    return None


_ENGINE_DONOR = "mtia300"


def _engine_design() -> dict:
    """Offload-engine parameters of the MTIA 300 preset, for chips that have none (a what-if)."""
    _, _, off = parse_chip(read_file(preset_path("chips", _ENGINE_DONOR)), _ENGINE_DONOR)
    return {k: getattr(off, k) for k in ("clock_Hz", "reduce_bytes_per_cycle", "reduce_bytes_per_cycle_all_busy",
                                         "setup_s", "msgs_per_engine")}


def _prepare_engines(st: State) -> State:
    if float(st.system.offload.engines) > 0:
        return st
    st = _off(st, **_engine_design())
    return st._replace(plan=_rep(st.plan, offload=jnp.ones_like(st.plan.offload)))


def _onehot_setter(attr: str, n: int):
    def set_(st: State, v):
        return st._replace(plan=_rep(st.plan, **{attr: jax.nn.one_hot(jnp.round(v).astype(jnp.int32), n)}))
    return set_


def _onehot_getter(attr: str, choices):
    def get(st: State):
        return choices[int(np.argmax(np.asarray(getattr(st.plan, attr))))]
    return get


def _algo_setter(row: int, choices: tuple[str, ...]):
    index = jnp.asarray([ALGORITHMS.index(a) for a in choices])      # a choice's position in ALGORITHMS

    def set_(st: State, v):
        onehot = jax.nn.one_hot(index[jnp.round(v).astype(jnp.int32)], len(ALGORITHMS))
        return st._replace(plan=_rep(st.plan, algorithm=st.plan.algorithm.at[row].set(onehot)))
    return set_


def _algo_getter(row: int):
    def get(st: State):
        return ALGORITHMS[int(np.argmax(np.asarray(st.plan.algorithm)[row]))]
    return get


def _model(st: State, **kw) -> State:
    return st._replace(model=_rep(st.model, **kw))


def _tables(st: State, **kw) -> State:
    return _model(st, tables=_rep(st.model.tables, **kw))


def _bounds(f: Field, scale: float | None = None) -> dict:
    """A knob's bounds from a schema field, in the knob's unit (`scale`: SI per knob unit; default:
    the field's own unit)."""
    r = 1.0 if scale is None else f.scale / scale
    return dict(lo=f.lo * r, hi=f.hi * r, integer=f.integer)


_BANDWIDTH = _bounds(CHIP["nic.pcie_bandwidth_GBps"])       # every link bandwidth's, in GB/s
_SCALE = dict(lo=1e-6, hi=1e6)                             # a factor on table sizes (their own bounds apply)


def _leaf(kind: str, name: str, doc: str, path: tuple[str, ...], **kw) -> "Knob":
    """A knob that is one leaf of the System (path of attribute names), in the unit and within the
    bounds of the config field that sets it (schema)."""
    f = SYSTEM_LEAVES[".".join(path)]
    unit, scale = f.unit, f.scale
    kw = {**_bounds(f, scale), "leaves": (".".join(path),), **kw}
    def get(st: State):
        obj = st.system
        for p in path:
            obj = getattr(obj, p)
        return float(obj) / scale

    def set_(st: State, v):
        if len(path) == 1:
            return _sys(st, **{path[0]: v * scale})
        return _sys(st, **{path[0]: _rep(getattr(st.system, path[0]), **{path[1]: v * scale})})
    return Knob(name, kind, unit, doc, get, set_, **kw)


# --------------------------------------------------------------------------------------- the registry

def _registry() -> dict[str, Knob]:
    H, W, P = KINDS
    k: list[Knob] = [
        # ---- network and NIC
        Knob("scale_out_bandwidth_GBps", H, "GB/s",
             "Per-chip, per-direction scale-out bandwidth of the NIC (nominal). On a NIC that also carries "
             "scale-up (serves_scale_up) the scale-up bandwidth stays fixed: total' = up + out', f' = up / total'. "
             "Behind PCIe the PCIe cap still applies (see the scale_out_link_Bps column).",
             _get_out, _set_out, **_BANDWIDTH),
        Knob("scale_up_bandwidth_GBps", H, "GB/s",
             "Per-chip, per-direction scale-up bandwidth: the dedicated link (NVLink) or, on a NIC that carries "
             "scale-up, its scale-up share with the scale-out bandwidth kept fixed.",
             _get_up, _set_up, **_BANDWIDTH, leaves=("chip.scale_up_Bps",)),
        Knob("nic_bandwidth_GBps", H, "GB/s",
             "Total bandwidth of the chip's active NIC ports (ports x port bandwidth), the scale-up/scale-out "
             "split kept.",
             lambda st: float(_nic_total(st)) / GBPS,
             lambda st, v: _nic(st, port_Bps=v * GBPS / st.system.nic.active_ports), **_BANDWIDTH,
             leaves=("nic.port_Bps", "nic.active_ports")),
        Knob("nic_scale_up_fraction", H, "",
             "Share of the NIC bandwidth given to scale-up on a NIC that carries both (MTIA 300, Gaudi 3); the "
             "total stays. The GPU-like split of an H100 (450 GB/s NVLink, 50 GB/s NIC) is 0.9.",
             lambda st: float(st.system.nic.scale_up_fraction),
             lambda st, v: _nic(st, scale_up_fraction=v), **_bounds(CHIP["nic.scale_up_fraction"]),
             applies=_only_shared, leaves=("nic.scale_up_fraction",)),
        Knob("nic_attach_pcie", H, "",
             "1: the NIC sits behind PCIe (bandwidth capped by pcie_bandwidth_GBps, pcie_latency_us added per "
             "message); 0: integrated in the package (DMA straight from HBM). Values in between blend linearly. "
             "An integrated NIC moved behind PCIe uses the chip's host PCIe link unless pcie_bandwidth_GBps is set.",
             lambda st: float(st.system.nic.pcie), lambda st, v: _nic(st, pcie=v), hi=1.0, leaves=("nic.pcie",)),
        _leaf(H, "pcie_bandwidth_GBps", "Bandwidth of the PCIe link in front of a PCIe-attached NIC "
              "(per direction); no effect while nic_attach_pcie = 0.", ("nic", "pcie_Bps")),
        _leaf(H, "pcie_latency_us", "Latency a PCIe-attached NIC adds to every network message.",
              ("nic", "pcie_latency_s")),
        _leaf(H, "nic_latency_us", "NIC processing per message.", ("nic", "latency_s")),
        _leaf(H, "nic_per_message_overhead_us", "Host / proxy cost per network message "
              "(NCCL's proxy thread on a GPU host; MTIA's express doorbells make it small).", ("nic", "per_message_s")),
        Knob("scale_out_latency_us", H, "us", "Wire and switch latency of every scale-out network level "
             "(NIC, host and PCIe costs are separate knobs).",
             lambda st: _level_value(st, "scale_out", "latency_s") / US,
             lambda st, v: _levels(st, "scale_out", latency_s=v * US), **_bounds(SYSTEM["network.levels[].latency_us"]),
             applies=_needs_level("scale_out"), leaves=("levels[scale_out].latency_s",)),
        Knob("scale_up_latency_us", H, "us", "Wire and switch latency of every scale-up network level.",
             lambda st: _level_value(st, "scale_up", "latency_s") / US,
             lambda st, v: _levels(st, "scale_up", latency_s=v * US), **_bounds(SYSTEM["network.levels[].latency_us"]),
             applies=_needs_level("scale_up"), leaves=("levels[scale_up].latency_s",)),
        Knob("scale_out_oversubscription", H, "", "Oversubscription of every scale-out level (1 = non-blocking).",
             lambda st: _level_value(st, "scale_out", "oversubscription"),
             lambda st, v: _levels(st, "scale_out", oversubscription=v),
             **_bounds(SYSTEM["network.levels[].oversubscription"]), applies=_needs_level("scale_out"),
             leaves=("levels[scale_out].oversubscription",)),
        # ---- offload engines and core-driven collectives
        Knob("offload_engines", H, "engines",
             "Collective-offload (message) engines per chip. 0: collectives are core-driven (they take "
             "core_collective_compute_fraction of the compute units and core_collective_hbm_multiplier x their bytes "
             "of HBM traffic). A chip without engines gets MTIA 300's engine design (clock, reduce throughput, "
             "setup, messages in flight), and the plan made for it is switched to use them.",
             lambda st: float(st.system.offload.engines), lambda st, v: _off(st, engines=v),
             **_bounds(CHIP["offload.engines"]), prepare=_prepare_engines, leaves=("offload.engines",)),
        _leaf(H, "engine_setup_us", "Fixed cost of starting one collective on the offload engines.",
              ("offload", "setup_s")),
        Knob("engine_reduce_GBps", H, "GB/s", "Reduction throughput of one offload engine while all run at once "
             "(clock x bytes per cycle).",
             lambda st: float(st.system.offload.clock_Hz * st.system.offload.reduce_bytes_per_cycle_all_busy) / GBPS,
             lambda st, v: _off(st, reduce_bytes_per_cycle_all_busy=v * GBPS / st.system.offload.clock_Hz),
             **_BANDWIDTH),
        _leaf(H, "core_collective_compute_fraction", "Share of the compute units a core-driven "
              "collective occupies while it runs (NCCL: ~16 of 132 SMs).", ("chip", "core_compute_fraction")),
        _leaf(H, "core_collective_hbm_multiplier", "HBM bytes a core-driven collective moves per "
              "network byte (2-3 for NCCL).", ("chip", "core_hbm_mult")),
        # ---- compute and memory
        _leaf(H, "peak_bf16_TFLOPs", "Peak dense bf16 throughput.", ("chip", "peak_bf16_flops")),
        _leaf(H, "peak_fp8_TFLOPs", "Peak dense fp8 throughput.", ("chip", "peak_fp8_flops")),
        _leaf(H, "peak_fp32_TFLOPs", "Peak fp32 throughput.", ("chip", "peak_fp32_flops")),
        _leaf(H, "matmul_efficiency_max", "Fraction of peak a large GEMM reaches.",
              ("chip", "matmul_eff_max")),
        _leaf(H, "hbm_bandwidth_GBps", "Peak HBM bandwidth (achievable = x hbm_efficiency).",
              ("chip", "hbm_Bps")),
        _leaf(H, "hbm_capacity_GB", "HBM capacity per chip (usable = x hbm_usable_fraction).",
              ("chip", "hbm_bytes")),
        _leaf(H, "launch_overhead_us", "Fixed cost per kernel.", ("chip", "launch_s")),
        _leaf(H, "host_link_bandwidth_GBps", "Chip-to-host link (host-DRAM embeddings).",
              ("chip", "host_link_Bps")),
        # ---- cost and power
        _leaf(H, "chip_usd_per_hour", "Price of one chip per hour (presets: placeholders).",
              ("chip", "usd_per_hour")),
        _leaf(H, "host_power_W", "Power of one host, its accelerators included.", ("host_power_W",)),
        # ---- workload
        Knob("global_batch", W, "samples", "Samples per training step, over all chips.",
             lambda st: float(st.model.global_batch), lambda st, v: _model(st, global_batch=v),
             **_bounds(MODEL["global_batch"])),
        Knob("pooling_scale", W, "x", "Multiplies every table's pooling factor (lookups per sample).",
             lambda st: 1.0, lambda st, v: _tables(st, pooling=st.model.tables.pooling * v), **_SCALE),
        Knob("embedding_rows_scale", W, "x", "Multiplies every table's row count (memory, unique rows updated).",
             lambda st: 1.0, lambda st, v: _tables(st, rows=st.model.tables.rows * v), **_SCALE),
        # ---- plan
        Knob("a2a_precision", P, "", "Precision of the embedding all-to-alls (output and gradient distribution).",
             _onehot_getter("a2a_precision", PRECISIONS), _onehot_setter("a2a_precision", len(PRECISIONS)),
             choices=PRECISIONS),
        Knob("grad_precision", P, "", "Precision of the dense gradient synchronization.",
             _onehot_getter("grad_precision", PRECISIONS), _onehot_setter("grad_precision", len(PRECISIONS)),
             choices=PRECISIONS),
        Knob("dense_mode", P, "", "Dense parallelism: replicated (DDP), fully sharded, or hybrid (sharded in the "
             "scale-up domain, replicated across).",
             _onehot_getter("dense_mode", DENSE_MODES), _onehot_setter("dense_mode", len(DENSE_MODES)),
             choices=DENSE_MODES),
        Knob("a2a_algorithm", P, "", "All-to-all algorithm.", _algo_getter(0), _algo_setter(0, ALLOWED_ALGORITHMS["all_to_all"]),
             choices=ALLOWED_ALGORITHMS["all_to_all"]),
        Knob("all_reduce_algorithm", P, "", "All-reduce algorithm.", _algo_getter(1), _algo_setter(1, ALLOWED_ALGORITHMS["all_reduce"]),
             choices=ALLOWED_ALGORITHMS["all_reduce"]),
        Knob("plan_offload", P, "", "1: collectives run on the offload engines (if the chip has any); 0: on cores.",
             lambda st: float(st.plan.offload), lambda st, v: st._replace(plan=_rep(st.plan, offload=_f(v))),
             hi=1.0),
        Knob("plan_pipeline", P, "", "1: the input all-to-all of the next batch overlaps this step (TorchRec's "
             "sparse-dist pipeline); 0: it runs at the start of the step.",
             lambda st: float(st.plan.pipeline), lambda st, v: st._replace(plan=_rep(st.plan, pipeline=_f(v))),
             hi=1.0),
        Knob("grad_buckets", P, "buckets", "Gradient buckets of the dense gradient synchronization.",
             lambda st: float(st.plan.grad_buckets),
             lambda st, v: st._replace(plan=_rep(st.plan, grad_buckets=_f(v))), lo=1.0, hi=1024.0, integer=True),
        Knob("overlap_chunks", P, "chunks", "Chunks for overlapping the embedding all-to-alls with the top MLP.",
             lambda st: float(st.plan.overlap_chunks),
             lambda st, v: st._replace(plan=_rep(st.plan, overlap_chunks=_f(v))), lo=1.0, hi=1024.0, integer=True),
    ]
    return {x.name: x for x in k}


KNOBS: dict[str, Knob] = _registry()


def knob(name: str) -> Knob:
    """The knob called `name`; ConfigError listing the known ones otherwise."""
    if name not in KNOBS:
        raise ConfigError("", "vary", f"unknown knob {name!r}; known: {', '.join(KNOBS)} "
                          "(`perfmodel sweep --list-knobs` describes each)")
    return KNOBS[name]


def check_applies(names, state: State) -> None:
    for n in names:
        k = knob(n)
        why = k.applies(state) if k.applies else None
        if why:
            raise ConfigError("", f"vary.{n}", why)


def order(names) -> list[str]:
    """Knob names in application order: hardware, workload, plan; stable within each kind."""
    return sorted(names, key=lambda n: KINDS.index(knob(n).kind))


def prepare(names, state: State) -> State:
    """Concrete, once: what knobs need before their setters run (e.g. an engine design)."""
    for n in order(names):
        if knob(n).prepare:
            state = knob(n).prepare(state)
    return state


def apply(names, state: State, values) -> State:
    """Set the knobs `names` (already in application order) to `values` (floats, traceable)."""
    for i, n in enumerate(names):
        state = knob(n).set(state, values[i])
    return state


MAX_CORNERS = 1024     # points check_values sets the knobs to: every one of a sweep, or its box's corners


def _leaves(obj, leaves: dict):
    """(leaf name, field, value) of every schema leaf of a System or RankingModel."""
    for name, f in leaves.items():
        *path, last = name.split(".")
        objs = [obj]
        for part in path:
            objs = [x for o in objs for x in (getattr(o, part[:-2]) if part.endswith("[]") else [getattr(o, part)])]
        for o in objs:
            yield name, f, getattr(o, last)


def _out_of_bounds(before: State, after: State):
    """(field, value in its unit) of the first leaf the knobs changed to a value outside the schema's
    bounds (not finite, or beyond them by more than float32 rounding), or None."""
    for b, a, leaves in ((before.system, after.system, SYSTEM_LEAVES), (before.model, after.model, MODEL_LEAVES)):
        for (_, f, x0), (_, _, x) in zip(_leaves(b, leaves), _leaves(a, leaves)):
            if x is x0:
                continue
            v = np.asarray(x, np.float64) / f.scale
            bad = ~np.isfinite(v) | (v < f.lo * (1 - 1e-6)) | (v > f.hi * (1 + 1e-6))
            if np.any(bad):
                return f, float(v[bad].flat[0]) if v.ndim else float(v)
    return None


def _corners(values: np.ndarray) -> np.ndarray:
    """Points that bound what a sweep over `values` ([N, K]) sets: every point when there are few,
    else the corners of their box (each leaf is monotone in each knob), else each knob alone at its
    least and greatest value with the others at their least, and all at their greatest."""
    if len(values) <= MAX_CORNERS:
        return values
    lo, hi = values.min(axis=0), values.max(axis=0)
    K = values.shape[1]
    if 2 ** K <= MAX_CORNERS:
        pick = (np.arange(2 ** K)[:, None] >> np.arange(K)) & 1
        return np.where(pick == 1, hi, lo)
    alone = np.repeat(lo[None], K, axis=0)
    alone[np.arange(K), np.arange(K)] = hi
    return np.concatenate([lo[None], hi[None], alone])


def check_values(names, values: np.ndarray, state: State) -> None:
    """ConfigError if the knobs `names` (application order), set to some row of `values` ([N, K],
    encoded), would set a field of the system or model outside the schema's bounds: a derived one
    (scale_out_bandwidth_GBps sets the port bandwidth and the NIC split; embedding_rows_scale every
    table's rows) or a leaf beyond float32. Values are checked one by one by Knob.encode; this
    checks what they make. `state` holds a plan (the knobs' prepare steps may need it)."""
    hw = [j for j, n in enumerate(names) if knob(n).kind != "plan"]
    if not hw:
        return
    sub = [names[j] for j in hw]
    base = prepare(sub, state)
    for row in _corners(np.asarray(values, np.float64)[:, hw]):
        bad = _out_of_bounds(base, apply(sub, base, [np.float64(v) for v in row]))
        if bad is None:
            continue
        f, got = bad
        changed = [(n, knob(n).decode(v)) for n, v in zip(sub, row)]
        what = ", ".join(f"{n}={v:g}" if isinstance(v, float) else f"{n}={v}" for n, v in changed)
        field = f"vary.{sub[0]}" if len(sub) == 1 else "vary"
        raise ConfigError("", field, f"{what} make{'s' if len(sub) == 1 else ''} {f.name} {got:.6g}, outside "
                          f"what the model takes: {f.allowed()}")


def set_knobs(system: System, model: RankingModel, plan: PlanArrays, **values) -> State:
    """Concrete: (system, model, plan arrays) with the named knobs set, e.g.
    set_knobs(s, m, pa, scale_out_bandwidth_GBps=400, offload_engines=0)."""
    state = State(system, model, plan)
    check_applies(values, state)
    names = order(values)
    enc = [knob(n).encode(values[n]) for n in names]
    check_values(names, np.asarray([enc]), state)
    state = prepare(names, state)
    return apply(names, state, [jnp.asarray(v, jnp.float32) for v in enc])


def describe() -> str:
    """Every knob, one paragraph each (the text of `perfmodel sweep --list-knobs`)."""
    out = []
    for kind in KINDS:
        out.append(f"{kind} knobs:")
        for k in KNOBS.values():
            if k.kind == kind:
                out.append(f"  {k.name:<34} {k.unit or '-':<8} {k.allowed()}")
                out.append(f"      {k.doc}")
    return "\n".join(out)
