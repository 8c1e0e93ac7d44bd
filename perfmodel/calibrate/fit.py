"""The model's predictions of the measurements, the fit of the chip's efficiency parameters (Adam on a
Huber loss of the log error), the held-out split and its errors."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from ..cache import jit
from ..cost.compute import gemm_times, memory_time
from ..cost.embedding import embedding_costs
from ..evaluate import evaluate_arrays
from ..hardware import System
from ..plan import Plan, TablePlan, to_arrays
from ..workload import Dense, parse_model
from .timing import KIND_WEIGHTS, KINDS, Measurement, step_dict

# ------------------------------------------------------------------------- model predictions

def _matmul_model(shapes, dtype: str):
    """A RankingModel whose dense part is the benchmark GEMMs (local batch 1, m = M rows)."""
    data = step_dict(1, 8, 1, 1, (8,), (8,), "dot", 10, dtype)
    model = parse_model(data, "calibration")
    s = np.asarray(shapes, np.float32)
    f = lambda x: jnp.asarray(x, jnp.float32)
    G = len(shapes)
    dense = Dense(m=f(s[:, 0]), n=f(s[:, 2]), k=f(s[:, 1]), weighted=f(np.ones(G)), bias=f(np.zeros(G)),
                  elementwise=f(np.zeros(G)), bottom=(True,) * G, layer=tuple(f"mm{i}" for i in range(G)))
    return dataclasses.replace(model, dense=dense)


def predictor(ms: list[Measurement], system: System, dtype: str):
    """(f, order): f(chip) -> the model's seconds for every measurement in `order` (differentiable)."""
    mem = [m for m in ms if m.kind == "memory"]
    mem_bytes = jnp.asarray([m.params["bytes"] for m in mem], jnp.float32)
    mm = [m for m in ms if m.kind == "matmul"]
    em = [m for m in ms if m.kind == "embedding"]
    st = [m for m in ms if m.kind == "step"]
    mm_model = _matmul_model([(m.params["M"], m.params["K"], m.params["N"]) for m in mm], dtype) if mm else None
    # embedding: one single-table model per benchmark, stacked for vmap
    emb_models = [parse_model(step_dict(1, m.params["dim"], m.params["pooling"], m.params["batch"], (m.params["dim"],),
                                         (m.params["dim"],), "dot", m.params["rows"], "fp32"), "calibration") for m in em]
    if emb_models:
        names = emb_models[0].tables.names
        emb_models = [dataclasses.replace(x, name="emb", tables=dataclasses.replace(x.tables, names=names))
                      for x in emb_models]
        emb_stack = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *emb_models)
        upd = jnp.asarray([m.params["update"] for m in em], jnp.float32)
        pa1 = to_arrays(Plan(tables={names[0]: TablePlan("table_wise", [0])}), system, emb_models[0])
    # whole steps: evaluate on a one-chip system, every table on it; configurations of one structure
    # (same tables and layers, different sizes) are stacked and evaluated in one vmap
    groups: dict = {}
    for i, m in enumerate(st):
        mod = dataclasses.replace(parse_model(m.params["config"], m.name), name="calibration step")
        groups.setdefault(jax.tree_util.tree_structure(mod), []).append((i, mod))
    step_groups = []
    for members in groups.values():
        mods = [mod for _, mod in members]
        pa = to_arrays(Plan(tables={n: TablePlan("table_wise", [0]) for n in mods[0].tables.names}), system, mods[0])
        step_groups.append(([i for i, _ in members], jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *mods), pa))
    back = np.argsort(np.concatenate([idx for idx, _, _ in step_groups])) if step_groups else None

    def predict(chip):
        sys_ = system.replace(chip=chip)
        out = []
        if mem:
            out.append(memory_time(chip, mem_bytes, mem_bytes) + chip.launch_s)
        if mm:
            fwd, _ = gemm_times(chip, mm_model, 1.0)
            out.append(fwd)
        if em:
            def one(model):
                e = embedding_costs(sys_, model, pa1, 4.0, 4.0)
                return e.fwd_s[0], e.bwd_s[0]
            f, b = jax.vmap(one)(emb_stack)
            out.append(f + upd * b)
        if step_groups:
            steps = jnp.concatenate([jax.vmap(lambda mod: evaluate_arrays(sys_, mod, pa, 0.0).step_s)(stack)
                                     for _, stack, pa in step_groups])
            out.append(steps[back])
        return jnp.concatenate(out)
    return predict, mem + mm + em + st


# ------------------------------------------------------------------------------------- fitting

FITTED = ("peak", "matmul_eff_max", "matmul_half_flop", "hbm_eff", "gather_eff_max", "gather_half_row_bytes", "launch_s",
          "llc_Bps")


def _logit(p):
    p = min(max(float(p), 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


def fit(ms: list[Measurement], system: System, dtype: str, *, peaks: str, stream_Bps: float,
        iterations: int, lr: float = 0.05):
    """Fit the chip's efficiency parameters on the training measurements; returns (chip, history)."""
    predict, order = predictor(ms, system, dtype)
    y = jnp.asarray([m.seconds for m in order], jnp.float32)
    train = jnp.asarray([m.train for m in order], jnp.float32)
    kind_ids = np.asarray([KINDS.index(m.kind) for m in order])
    wk = np.zeros(len(order), np.float32)
    for k, kw in enumerate(KIND_WEIGHTS):    # per kind, whatever its count
        sel = (kind_ids == k) & np.asarray([m.train for m in order])
        if sel.any():
            wk[sel] = kw / sel.sum()
    w = jnp.asarray(wk / max(wk.sum(), 1e-12))
    chip0 = system.chip
    pk = {"fp32": "peak_fp32_flops", "bf16": "peak_bf16_flops"}[dtype]
    mm = [m for m in order if m.kind == "matmul"]
    best = max((2.0 * m.params["M"] * m.params["K"] * m.params["N"] / m.seconds for m in mm), default=float(getattr(chip0, pk)))
    measured = peaks == "measured"
    # no published peak or bandwidth (a CPU): the fitted effective peak and bandwidth stand in for
    # them (efficiency maxima 1 by definition); otherwise the published ones stay and the
    # efficiencies are fitted
    theta = {
        "peak": jnp.float32(math.log(best * 1.2) if measured else _logit(float(chip0.matmul_eff_max))),
        "half": jnp.float32(math.log(1e6 if measured else float(chip0.matmul_half_flop))),
        "hbm": jnp.float32(math.log(stream_Bps) if measured else _logit(float(chip0.hbm_eff))),
        "gmax": jnp.float32(_logit(0.5 if measured else float(chip0.gather_eff_max))),
        "ghalf": jnp.float32(math.log(float(chip0.gather_half_row_bytes))),
        "launch": jnp.float32(math.log(10e-6 if measured else float(chip0.launch_s))),
    }
    if measured:     # no published cache bandwidth either: fitted, from twice the streaming one
        theta["llc"] = jnp.float32(math.log(2.0 * stream_Bps))

    def chip_of(th):
        if measured:
            c = dataclasses.replace(chip0, **{pk: jnp.exp(th["peak"])}, matmul_eff_max=jnp.float32(1.0),
                                    hbm_Bps=jnp.exp(th["hbm"]), hbm_eff=jnp.float32(1.0), llc_Bps=jnp.exp(th["llc"]))
        else:
            c = dataclasses.replace(chip0, matmul_eff_max=jax.nn.sigmoid(th["peak"]), hbm_eff=jax.nn.sigmoid(th["hbm"]))
        return dataclasses.replace(c, matmul_half_flop=jnp.exp(th["half"]), gather_eff_max=jax.nn.sigmoid(th["gmax"]),
                                   gather_half_row_bytes=jnp.exp(th["ghalf"]), launch_s=jnp.exp(th["launch"]))

    def loss(th):    # Huber on the log ratio: a few odd kernels do not dominate the fit
        r = jnp.log(predict(chip_of(th))) - jnp.log(y)
        return jnp.sum(w * train * optax.huber_loss(r, delta=0.3))

    opt = optax.adam(lr)
    state = opt.init(theta)

    @jit                  # perfmodel's compile options (cache.jit), as for its other programs of the model
    def update(th, st):
        l, g = jax.value_and_grad(loss)(th)
        u, st = opt.update(g, st, th)
        return optax.apply_updates(th, u), st, l
    hist = []
    for _ in range(iterations):
        theta, state, l = update(theta, state)
        hist.append(float(l))
    chip = chip_of(theta)
    pred = np.asarray(jit(predict)(chip))
    for m, p in zip(order, pred):
        m.predicted = float(p)
    return chip, hist


def split(ms: list[Measurement]) -> None:
    """Hold out every other measurement of each group (a kind; per step structure and per lookup /
    lookup+update), ordered by time, so that both halves span every group's range."""
    groups: dict = {}
    for m in ms:
        groups.setdefault((m.kind, _group(m)), []).append(m)
    for sel in groups.values():
        for i, m in enumerate(sorted(sel, key=lambda m: m.seconds)):
            m.train = i % 2 == 0


def _group(m: Measurement):
    if m.kind == "step":
        return (len(m.params["config"]["embeddings"]["rows"]),
                tuple(l["kind"] for l in m.params["config"]["dense"]["layers"]))
    return m.params.get("update", 0)


def errors(ms: list[Measurement]) -> dict:
    """Per kind and split: count, median and 90th-percentile relative error |pred / meas - 1|."""
    out = {}
    for kind in KINDS:
        for part, flag in (("train", True), ("held_out", False)):
            e = np.asarray([abs(m.predicted / m.seconds - 1.0) for m in ms if m.kind == kind and m.train == flag])
            if e.size:
                out[f"{kind}/{part}"] = {"n": int(e.size), "median": float(np.median(e)),
                                         "p90": float(np.percentile(e, 90))}
    return out


