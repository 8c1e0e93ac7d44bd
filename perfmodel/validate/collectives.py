"""Validation against published collective measurements (data/measurements/collectives/*.csv).

Every CSV is one dataset: rows of (system preset, collective, algorithm, size in bytes, metric,
measured value, source). For each row the model's time comes from the collective cost functions
(cost/collectives) on the named system, blind (the presets as they are), and calibrated: two
parameters of the network, a latency scale (every per-step latency and the launch) and a bandwidth
scale (every link), fitted (optax, on the squared log error plus a weak pull towards 1) on half of
the dataset's rows (every other row by message size) and judged on the other half.

  metric busbw_GBps   nccl-tests bus bandwidth: time = size x f / busbw, f = 2(n-1)/n for all-reduce,
                      (n-1)/n for all-gather, reduce-scatter and all-to-all
  metric time_us      the time itself (where the printed bus bandwidth has too few digits)
  metric nvlink_GBps / rdma_GBps   DeepEP's bottleneck bandwidth: bytes a GPU moves over that link /
                      time (an all-to-all spread evenly over the n ranks: (L-1)/n of it inside the
                      node of L, (n-L)/n across nodes)

Algorithms, as cost/collectives models them (core-driven, NCCL's protocols LL / LL128 / Simple,
the fastest taken): "ring" with the ring; "nvls" with NVLS (NVLink SHARP, the reduction in the
switch) where the system's scale-up level says its switch reduces (switch_reduction), else with the
ring (flagged); "collnet" with the hierarchical all-reduce whose outer level reduces in its switches
(SHARP) where the system's scale-out level says so; "default" (NCCL's own choice) with the fastest
of the algorithms the model has (all-reduce: ring, tree, NVLS and in-network where available;
all-gather and reduce-scatter: ring). All-to-all uses the direct form inside a node and the
hierarchical one across.

The harness that timed a row (column harness) launches its calls ahead of the GPUs: a row's
prediction is the larger of the model's time and the harness's per-call floor (harness_floors: the
median of its small one-node rows, one figure per harness across all its datasets; none for one
process per GPU). The presets, and so whole steps, never see it.

Error of a row: predicted / measured time - 1. Per dataset: the geometric-mean error
exp(mean |ln(t_pred / t_meas)|) - 1 (a 2x miss either way counts as 100 %), and the largest one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..cache import jit
from ..config import DATA_DIR, ConfigError
from ..cost import collectives as coll
from ..hardware import load_system
from ..schema import ALGORITHMS
from .csvfile import read_rows, shown

MEASUREMENTS = DATA_DIR / "measurements" / "collectives"
COLUMNS = ("system", "collective", "algorithm", "size_bytes", "metric", "value", "harness", "source", "note")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")
METRICS = ("busbw_GBps", "time_us", "nvlink_GBps", "rdma_GBps")
# what timed the row: nccl-tests with one process per GPU (mpirun / Slurm), nccl-tests with one
# process driving every GPU of the node (-g 8), torch.distributed (a Python loop of all_reduce
# calls), DeepEP's own benchmark
HARNESSES = ("nccl-tests", "nccl-tests-1proc", "torch.distributed", "deepep")
# rows at most this large on one node measure the harness's per-call floor (see harness_floors)
FLOOR_BYTES = 64 * 2**10
TARGET_BLIND, TARGET_CALIBRATED = 0.15, 0.07
RIDGE = 1e-3                 # on the log scales: a 2x scale costs as much as a 2 % misfit
_ONE = {a: np.eye(len(ALGORITHMS), dtype=np.float32)[i] for i, a in enumerate(ALGORITHMS)}


@dataclass
class Row:
    system: str
    collective: str
    algorithm: str
    size_bytes: float
    metric: str
    value: float
    source: str
    note: str = ""
    harness: str = "nccl-tests"
    train: bool = True
    blind_s: float = float("nan")
    calibrated_s: float = float("nan")


@dataclass
class Dataset:
    name: str
    path: Path
    rows: list[Row] = field(default_factory=list)


# ------------------------------------------------------------------------------------- loading

def load_datasets(folder: str | Path | None = None) -> list[Dataset]:
    """Every CSV of `folder` (default data/measurements/collectives), checked: one clear error per problem."""
    folder = Path(folder) if folder else MEASUREMENTS
    if not folder.is_dir():
        raise ConfigError(str(folder), "", "no such folder of measurements")
    out = []
    for path in sorted(folder.glob("*.csv")):
        ds = Dataset(path.stem, path)
        systems: dict[str, str] = {}           # system name -> where it was first named
        for where, raw in read_rows(path, COLUMNS, "dataset"):
            ds.rows.append(_row(raw, where))
            systems.setdefault(ds.rows[-1].system, where)
        if len(ds.rows) < 2:
            raise ConfigError(str(path), "", f"holds {len(ds.rows)} row{'' if len(ds.rows) == 1 else 's'}; a dataset needs at least 2 (half fit the "
                              "calibration, half judge it)")
        for name, where in systems.items():
            try:
                chips = load_system(name).num_chips
            except ConfigError as err:
                raise ConfigError(where, "system", err.message) from None
            if chips < 2:                 # a collective moves nothing on one chip: no time to compare
                raise ConfigError(where, "system", f"{name} has {chips} chip; a collective's measurement needs a "
                                  "system of at least 2")
        out.append(ds)
    if not out:
        raise ConfigError(str(folder), "", "holds no *.csv datasets")
    return out


# bounds that keep a row's time finite in float32 (a size of 1e300 bytes made it NaN)
ROW_BOUNDS = {"size_bytes": (1.0, 1e15, "bytes"), "value": (1e-6, 1e9, "GB/s, or us for time_us")}


def _row(raw: dict, where: str) -> Row:
    def num(key):
        lo, hi, unit = ROW_BOUNDS[key]
        allowed = f"a number from {lo:g} to {hi:g} ({unit})"
        try:
            v = float(raw[key])
        except (TypeError, ValueError):
            raise ConfigError(where, key, f"must be {allowed}, got {raw[key]!r}") from None
        if not (math.isfinite(v) and lo <= v <= hi):
            raise ConfigError(where, key, f"must be {allowed}, got {raw[key]!r}")
        return v
    if raw["collective"] not in COLLECTIVES:
        raise ConfigError(where, "collective", f"is {raw['collective']!r}; allowed: {', '.join(COLLECTIVES)}")
    if raw["metric"] not in METRICS:
        raise ConfigError(where, "metric", f"is {raw['metric']!r}; allowed: {', '.join(METRICS)}")
    if raw["harness"] not in HARNESSES:
        raise ConfigError(where, "harness", f"is {raw['harness']!r}; allowed: {', '.join(HARNESSES)}")
    if not (raw.get("source") or "").strip():
        raise ConfigError(where, "source", "is empty: every measurement names where it was published")
    return Row(raw["system"], raw["collective"], raw["algorithm"], num("size_bytes"), raw["metric"],
               num("value"), raw["source"], raw.get("note") or "", raw["harness"])


# ----------------------------------------------------------------------------------- the model

def _bus_factor(collective: str, n: int) -> float:
    return 2.0 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def _a2a_volumes(system, V):
    """[D, K] bytes each device sends to / receives from peers first reached at level l, for V
    bytes spread evenly over all n ranks; and the bytes of the inner / outer links."""
    n = system.num_chips
    first = np.asarray([s - p for s, p in zip([lv.size for lv in system.levels],
                                                [1] + [lv.size for lv in system.levels][:-1])], np.float32)
    vol = np.broadcast_to(V * first / n, (n, len(first))).astype(np.float32)
    return vol, float(V * first[0] / n), float(V * first[1:].sum() / n)


def _bottleneck_bytes(row: Row, system) -> float:
    """The bytes the row's metric divides by its time."""
    n = system.num_chips
    if row.metric in ("busbw_GBps", "time_us"):
        return float(row.size_bytes * _bus_factor(row.collective, n))
    _, inner, outer = _a2a_volumes(system, row.size_bytes)
    return inner if row.metric == "nvlink_GBps" else outer


def measured_seconds(row: Row, system) -> float:
    if row.metric == "time_us":
        return row.value * 1e-6
    return _bottleneck_bytes(row, system) / (row.value * 1e9)


def model_seconds(row: Row, system, latency_scale=1.0, bandwidth_scale=1.0, size_bytes=None):
    """The model's time for the row (jnp scalar; differentiable in the two scales), or for the row's
    collective at `size_bytes` instead of its own size (a tracer under vmap)."""
    net = coll.make_net(system, 0.0)
    net = net.retuned(
        alpha=[a * latency_scale for a in net.alpha], setup_s=net.setup_s * latency_scale,
        proto_base=tuple(b * latency_scale for b in net.proto_base),
        proto_step={k: tuple(x * latency_scale for x in v) for k, v in net.proto_step.items()},
        nvls_latency_s=net.nvls_latency_s * latency_scale, innet_latency_s=net.innet_latency_s * latency_scale,
        bw=[b * bandwidth_scale for b in net.bw], link_bw={k: v * bandwidth_scale for k, v in net.link_bw.items()},
        nvls_Bps=net.nvls_Bps * bandwidth_scale, ll_max_Bps=net.ll_max_Bps * bandwidth_scale)
    top = len(system.levels) - 1
    S = jnp.float32(row.size_bytes) if size_bytes is None else size_bytes
    if row.collective == "all_to_all":
        vol, _, _ = _a2a_volumes(system, 1.0)
        algo = "hierarchical" if top > 0 else "direct"
        v = jnp.asarray(vol) * S
        return coll.all_to_all(net, v, v, jnp.asarray(_ONE[algo]), jnp.max)
    if row.collective == "all_reduce" and row.algorithm == "nvls" and coll.has_nvls(net, 0, top):
        return coll.nvls_all_reduce(net, S, 0, top)
    if row.collective == "all_reduce" and row.algorithm == "collnet" and top > 0 and net.reduces[top]:
        return coll.all_reduce(net, S, 0, top, jnp.asarray(_ONE["hierarchical"]))
    if row.collective == "all_reduce" and row.algorithm == "default":
        return coll.nccl_all_reduce(net, S, 0, top)
    probs = jnp.asarray(_ONE["ring"])
    fn = {"all_reduce": coll.all_reduce, "all_gather": coll.all_gather, "reduce_scatter": coll.reduce_scatter}
    return fn[row.collective](net, S, 0, top, probs)


def _one_node(system) -> bool:
    return system.levels[0].size >= system.num_chips


def harness_floors(folder: str | Path | None = None) -> dict[str, float]:
    """Each harness's per-call floor in seconds: the median measured time of its rows of at most
    FLOOR_BYTES on one node, over every dataset of the repository's measurements (`folder` to use
    others). There the GPUs' work is NCCL's latency alone (15-25 us on 8 GPUs) and every measured
    time is flat in size: the host sets it (one process launching 8 GPUs' kernels in turn, or
    torch.distributed's dispatch per call). A harness with no such rows has no floor (0)."""
    times: dict[str, list[float]] = {h: [] for h in HARNESSES}
    for ds in load_datasets(folder):
        for r in ds.rows:
            if r.size_bytes <= FLOOR_BYTES:
                system = load_system(r.system)
                if _one_node(system):
                    times[r.harness].append(measured_seconds(r, system))
    return {h: float(np.median(t)) if t else 0.0 for h, t in times.items()}


def harnessed(model_s, floor_s):
    """The time a harness measures: its calls are launched back to back ahead of the GPUs (nccl-tests
    and torch.distributed time a loop of asynchronous calls), so the host's per-call work and the
    GPUs' run as two stages of a pipeline and the slower one sets the time per call."""
    return jnp.maximum(model_s, floor_s)


def split(rows: list[Row]) -> None:
    """Fit on every other row by message size (then by system, collective, algorithm); judge on the rest."""
    order = sorted(rows, key=lambda r: (r.size_bytes, r.system, r.collective, r.algorithm))
    for i, r in enumerate(order):
        r.train = i % 2 == 0


# messages from here up are bandwidth-bound on every system measured; below, the harness's own
# per-call floor (kernel launch, torch.distributed's dispatch) is a large part of what is measured
LARGE_BYTES = 2**20


def geomean_error(pred, meas) -> float:
    r = np.abs(np.log(np.asarray(pred, np.float64) / np.asarray(meas, np.float64)))
    return float(np.exp(r.mean()) - 1.0) if r.size else float("nan")


def largest_error(errs) -> float:
    """The largest of rows' errors (each predicted / measured - 1) in geomean_error's measure,
    exp(max |ln(predicted / measured)|) - 1, so that the largest is never below the mean (|ratio - 1|
    counts a 2x miss under as 50 % and over as 100 %)."""
    r = np.abs(np.log1p(np.asarray(list(errs), np.float64)))
    return float(np.exp(r.max()) - 1.0) if r.size else float("nan")


ERROR_MEASURE = ("errors: exp(mean |ln(predicted / measured)|) - 1, the geometric mean; max: the largest row's "
                 "exp(|ln(predicted / measured)|) - 1 (a 2x miss either way is 100 %)")


def validate_dataset(ds: Dataset, iterations: int = 300, floors: dict[str, float] | None = None) -> dict:
    """Blind and calibrated errors of one dataset; `floors`: each harness's per-call floor
    (harness_floors() by default)."""
    floors = harness_floors() if floors is None else floors
    systems = {name: load_system(name) for name in {r.system for r in ds.rows}}
    floor = jnp.asarray([floors.get(r.harness, 0.0) for r in ds.rows], jnp.float32)
    split(ds.rows)
    meas = np.asarray([measured_seconds(r, systems[r.system]) for r in ds.rows])

    # rows of one system, collective and algorithm differ only in size: one vmapped program each
    groups = {}
    for i, r in enumerate(ds.rows):
        groups.setdefault((r.system, r.collective, r.algorithm), []).append(i)
    order = np.argsort(np.concatenate([np.asarray(ix) for ix in groups.values()]))
    sizes = [jnp.asarray([ds.rows[i].size_bytes for i in ix], jnp.float32) for ix in groups.values()]

    def gpus(theta):              # the model's time of the collective itself
        lam, eta = jnp.exp(theta[0]), jnp.exp(theta[1])
        parts = [jax.vmap(lambda S, r=ds.rows[ix[0]]: model_seconds(r, systems[r.system], lam, eta, S))(sz)
                 for ix, sz in zip(groups.values(), sizes)]
        return jnp.concatenate(parts)[order]

    def predict(theta):           # as the row's harness measures it
        return harnessed(gpus(theta), floor)

    train = jnp.asarray([r.train for r in ds.rows], jnp.float32)
    y = jnp.log(jnp.asarray(meas, jnp.float32))

    def loss(theta):   # a weak pull to the preset (scale 1): a scale the fit rows cannot see stays put
        e = jnp.log(predict(theta)) - y
        return jnp.sum(train * e * e) / jnp.sum(train) + RIDGE * jnp.sum(theta * theta)

    opt = optax.adam(0.05)

    # one program per dataset: the fit, the blind prediction (the presets' scales, 1) and the fitted one,
    # compiled with the options of perfmodel's other programs (cache.jit: they compile faster)
    @jit
    def fit(theta):
        def body(carry, _):
            th, st = carry
            g = jax.grad(loss)(th)
            u, st = opt.update(g, st, th)
            return (optax.apply_updates(th, u), st), None
        (th, _), _ = jax.lax.scan(body, (theta, opt.init(theta)), None, length=iterations)
        return th, gpus(jnp.zeros(2)), predict(th)
    theta, model_only, cal = (np.asarray(x) for x in fit(jnp.zeros(2)))
    blind = np.maximum(model_only, np.asarray(floor))
    for r, b, c in zip(ds.rows, blind, cal):
        r.blind_s, r.calibrated_s = float(b), float(c)
    held = np.asarray([not r.train for r in ds.rows])
    rows = []
    for r, m, g in zip(ds.rows, meas, model_only):
        bb = _bottleneck_bytes(r, systems[r.system])
        rows.append({"system": r.system, "collective": r.collective, "algorithm": r.algorithm, "size_bytes": r.size_bytes,
                     "metric": r.metric, "measured_GBps": bb / float(m) / 1e9, "blind_GBps": bb / r.blind_s / 1e9,
                     "calibrated_GBps": bb / r.calibrated_s / 1e9, "measured_s": float(m), "model_s": float(g), "blind_s": r.blind_s,
                     "calibrated_s": r.calibrated_s, "blind_err": r.blind_s / m - 1.0,
                     "calibrated_err": r.calibrated_s / m - 1.0, "split": "fit" if r.train else "held_out",
                     "modelled_as": _modelled_as(r, systems[r.system]), "harness": r.harness,
                     "harness_floor_s": floors.get(r.harness, 0.0), "source": r.source})
    large = np.asarray([r.size_bytes >= LARGE_BYTES for r in ds.rows])
    return {"dataset": ds.name, "file": shown(ds.path), "rows": rows,
            "blind_geomean_err": geomean_error(blind, meas),
            "blind_large_geomean_err": geomean_error(blind[large], meas[large]), "n_large": int(large.sum()),
            "blind_max_err": float(np.max(np.abs(blind / meas - 1.0))),
            "calibrated_geomean_err": geomean_error(cal[held], meas[held]) if held.any() else float("nan"),
            "calibrated_max_err": float(np.max(np.abs(cal[held] / meas[held] - 1.0))) if held.any() else float("nan"),
            "latency_scale": float(np.exp(theta[0])), "bandwidth_scale": float(np.exp(theta[1])),
            "n_fit": int(sum(r.train for r in ds.rows)), "n_held_out": int(held.sum())}


def _modelled_as(r: Row, system) -> str:
    if r.collective == "all_to_all":
        return "hierarchical all-to-all" if len(system.levels) > 1 else "direct all-to-all"
    levels = "+".join(lv.name for lv in system.levels)
    what = r.collective.replace('_', '-')
    nvls = len(system.levels) == 1 and system.levels[0].switch_reduction
    if r.collective == "all_reduce" and r.algorithm == "nvls":
        return f"NVLS {what} in the {levels} switch" if nvls else f"ring {what} over {levels} (no NVLS on this system)"
    if r.collective == "all_reduce" and r.algorithm == "collnet":
        innet = len(system.levels) > 1 and system.levels[-1].switch_reduction
        return (f"hierarchical {what}, in the {system.levels[-1].name} switches" if innet
                else f"ring {what} over {levels} (no in-network reduction on this system)")
    if r.collective == "all_reduce" and r.algorithm == "default":
        algos = "ring, tree, NVLS" if nvls else "ring, tree"
        return f"fastest of {algos} {what} over {levels}, fastest protocol each"
    return f"ring {what} over {levels}, fastest protocol"


def validate(folder: str | Path | None = None, datasets: list[str] | None = None) -> dict:
    """Blind and calibrated error of every dataset; see the module docstring."""
    sets = load_datasets(folder)
    if datasets:
        known = {d.name for d in sets}
        bad = [d for d in datasets if d not in known]
        if bad:
            raise ConfigError(str(folder or MEASUREMENTS), "dataset", f"{bad[0]!r} is not a dataset; known: {', '.join(sorted(known))}")
        sets = [d for d in sets if d.name in datasets]
    floors = harness_floors()
    results = [validate_dataset(d, floors=floors) for d in sets]
    return {"datasets": results, "harness_floors_s": floors,
            "targets": {"blind_geomean": TARGET_BLIND, "calibrated_geomean": TARGET_CALIBRATED}}


def format_report(rep: dict, rows: bool = True) -> str:
    lines = [f"{'dataset':<36} {'rows':>4} {'blind':>8} {'max':>8}   {'calibrated':>10} {'max':>8}   latency x  bandwidth x"]
    for d in rep["datasets"]:
        ok_b = "" if d["blind_geomean_err"] <= TARGET_BLIND else " !"
        ok_c = "" if d["calibrated_geomean_err"] <= TARGET_CALIBRATED else " !"
        blind_max = largest_error(r["blind_err"] for r in d["rows"])
        cal_max = largest_error(r["calibrated_err"] for r in d["rows"] if r["split"] == "held_out")
        lines.append(f"{d['dataset']:<36} {len(d['rows']):>4} {100 * d['blind_geomean_err']:>7.1f}%{ok_b:2}"
                     f"{100 * blind_max:>6.0f}%   {100 * d['calibrated_geomean_err']:>9.1f}%{ok_c:2}"
                     f"{100 * cal_max:>6.0f}%   {d['latency_scale']:>9.3g}  {d['bandwidth_scale']:>11.3g}")
    lines.append(ERROR_MEASURE)
    lines.append(f"blind: every row, calibrated: held-out rows after "
                 f"fitting latency and bandwidth scales on the others; ! misses the target "
                 f"({100 * TARGET_BLIND:.0f} % blind, {100 * TARGET_CALIBRATED:.0f} % calibrated)")
    floors = ", ".join(f"{h} {1e6 * f:.1f} us" for h, f in rep.get("harness_floors_s", {}).items() if f > 0)
    if floors:
        lines.append(f"each harness's per-call floor (median time of its messages <= {FLOOR_BYTES // 1024} KiB on one node; "
                     f"a row's time is the larger of it and the model's): {floors}")
    if rows:
        for d in rep["datasets"]:
            lines.append("")
            lines.append(f"{d['dataset']}  ({d['file']})")
            lines.append(f"  {'system':<10} {'collective':<15} {'algorithm':<9} {'size':>10} {'metric':<9} {'measured':>9} "
                         f"{'blind':>9} {'err':>7} {'calibr.':>9} {'err':>7}  split")
            for r in d["rows"]:
                lines.append(f"  {r['system']:<10} {r['collective']:<15} {r['algorithm']:<9} {size_text(r['size_bytes']):>10} "
                             f"{r['metric']:<9} {r['measured_GBps']:>8.4g}  {r['blind_GBps']:>8.4g} {100 * r['blind_err']:>6.1f}% "
                             f"{r['calibrated_GBps']:>8.4g} {100 * r['calibrated_err']:>6.1f}%  {r['split']}")
        lines.append("")
        lines.append("GB/s in each row's metric (nccl-tests bus bandwidth, or DeepEP's bottleneck link bandwidth); "
                     "err: predicted / measured time - 1")
    return "\n".join(lines)


def size_text(b: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= f:
            return f"{b / f:.4g} {unit}"
    return f"{b:.0f} B"
