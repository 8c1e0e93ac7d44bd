"""A reference JAX DLRM training step, built from the same model config the cost model reads.

What one step does (TorchRec's DLRM, the semantics the cost model assumes):

  embedding bags   pooled_t[s] = sum_{j < P_t} W_t[idx_t[s, j]]   (a gather + a segment sum)
  bottom MLP       ReLU layers on the dense features, ending at the embedding dim d
  interaction      dot:   Z = X X^T over the F = T + 1 vectors of a sample, strict lower triangle,
                          concatenated with the bottom output (the backward is one GEMM,
                          dX = (dZ + dZ^T) X, the single dX the cost model counts)
                   dcnv2: x_{l+1} = x0 * (V_l (U_l x_l) + b_l) + x_l   (low-rank cross, Wang et al. 2021)
  top MLP          ReLU layers, the last one linear; loss = mean binary cross-entropy with logits
  optimizers       embeddings: row-wise Adagrad (one accumulator per row, fused sparse update of
                   the distinct rows touched), or SGD / lazy Adam; dense: SGD, Adagrad or Adam (optax)

`make_step(spec)` is the plain single-device step. `make_sharded_step(spec, plan, mesh)` runs the
same math over a 1-D mesh with `jax.shard_map`, placing every table as a perfmodel Plan says:

  table_wise / column_wise   indices all-to-all to the shard holders ("input_dist"), local lookups,
                             pooled vectors all-to-all back to the sample owners ("output_dist");
                             the backward is the transposed all-to-all ("grad_dist")
  row_wise                   indices all-gathered (static shapes cannot bucketize by owner), masked
                             local lookups, partial sums reduce-scattered over the batch; the
                             backward is the transposed all-gather
  data_parallel              local lookups on a replica, the dense table gradient all-reduced ("dp_sync")
  dense replicated           gradients all-reduced ("dense_sync");  fully_sharded: the flat parameter
                             vector is all-gathered ("param_gather") and its gradient reduce-scattered

SPMD needs one shape on every device, so uneven placements are padded to the largest device:
this is exactly the slowest device the cost model's all-to-all time is set by.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.ad_checkpoint import checkpoint_name

from .config import ConfigError, read_file
from .hardware import _resolve
from .plan import Plan
from .workload import RankingModel, parse_model

INDEX_DTYPE = jnp.int32
INDEX_BYTES = 4                       # the reference's indices are int32 (jax without x64)
DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp8": jnp.float8_e4m3fn}
ELEMENT_DTYPES = {4.0: jnp.float32, 2.0: jnp.bfloat16}
SUPPORTED_TYPES = ("data_parallel", "table_wise", "column_wise", "row_wise")


@dataclass(frozen=True)
class Layer:
    kind: str                          # "mlp" | "dot" | "dcnv2"
    name: str
    stage: str                         # "bottom" | "top"
    widths: tuple[int, ...] = ()       # mlp: input then outputs; dcnv2: (width,)
    layers: int = 0                    # dcnv2 cross layers
    rank: int = 0                      # dcnv2 low rank


@dataclass(frozen=True)
class Spec:
    """Everything the reference step needs, as static Python values (hashable: jit-static)."""

    name: str
    tables: tuple[str, ...]
    rows: tuple[int, ...]
    dim: int
    pooling: tuple[int, ...]
    layers: tuple[Layer, ...]
    global_batch: int
    dense_in: int
    dense_dtype: str = "fp32"
    emb_dtype: str = "fp32"
    emb_optimizer: str = "rowwise_adagrad"
    dense_optimizer: str = "adagrad"
    lr: float = 0.01
    eps: float = 1e-8

    @property
    def T(self) -> int:
        return len(self.tables)

    def with_batch(self, batch: int) -> "Spec":
        return replace(self, global_batch=int(batch))


# ------------------------------------------------------------------------------------ building

def load_spec(name_or_path: str | Path, *, batch: int | None = None, max_rows: int | None = None) -> Spec:
    """The reference spec of a model preset or model file (checked by the model loader first).

    batch overrides the global batch; max_rows caps every table's rows (a scaled-down model whose
    FLOPs and communication volumes do not depend on rows).
    """
    path = _resolve("models", name_or_path)
    data = read_file(path)
    return spec_from_dict(data, str(path), batch=batch, max_rows=max_rows)


def spec_from_dict(data: dict, src: str = "model", *, batch: int | None = None,
                   max_rows: int | None = None) -> Spec:
    """Build a Spec from a model config dict (the TOML layout of data/models)."""
    model = parse_model(data, src)            # every field checked, one clear error per problem
    tb = model.tables
    if float(np.max(np.asarray(tb.sequence))) > 0:
        raise ConfigError(src, "embeddings.sequence", "the reference step supports pooled features only")
    dims = np.asarray(tb.dim).astype(int)
    if len(set(dims.tolist())) != 1:
        raise ConfigError(src, "embeddings.dim", "the reference step needs one embedding dim for every table "
                          "(the interaction stacks them)")
    pool = np.asarray(tb.pooling, np.float64)
    if np.any(np.abs(pool - np.round(pool)) > 1e-6):
        raise ConfigError(src, "embeddings.pooling", "the reference step needs whole lookups per sample (fixed bags)")
    d, T = int(dims[0]), tb.count
    rows = [int(r) for r in np.asarray(tb.rows, np.float64)]
    if max_rows is not None:
        rows = [min(r, int(max_rows)) for r in rows]
    bpe = float(tb.bytes_per_element)
    if bpe not in ELEMENT_DTYPES:
        raise ConfigError(src, "embeddings.bytes_per_element", "the reference step stores tables in fp32 (4) or bf16 (2)")
    layers = _layers(data, src, T, d)
    opt = data["embeddings"].get("optimizer", "rowwise_adagrad")
    return Spec(name=model.name, tables=tb.names, rows=tuple(rows), dim=d,
                pooling=tuple(int(round(p)) for p in pool), layers=layers,
                global_batch=int(batch if batch is not None else float(model.global_batch)),
                dense_in=layers[0].widths[0], dense_dtype=model.dense_dtype,
                emb_dtype="fp32" if bpe == 4.0 else "bf16", emb_optimizer=opt,
                dense_optimizer=data.get("dense_optimizer", "adagrad"))


def _layers(data: dict, src: str, T: int, d: int) -> tuple[Layer, ...]:
    out = []
    for i, raw in enumerate(data["dense"]["layers"]):
        kind, stage = raw["kind"], raw["stage"]
        name = raw.get("name", f"{kind}{i}")
        where = f"dense.layers[{i}]"
        if kind == "mlp":
            out.append(Layer("mlp", name, stage, (int(raw["input"]), *(int(w) for w in raw["widths"]))))
        elif kind == "dot":
            if int(raw["features"]) != T + 1 or int(raw["dim"]) != d:
                raise ConfigError(src, where, f"the dot interaction of {T} tables needs features = {T + 1} and dim = {d}")
            out.append(Layer("dot", name, stage, (T + 1, d)))
        elif kind == "dcnv2":
            if int(raw["width"]) != (T + 1) * d:
                raise ConfigError(src, where + ".width", f"DCNv2 on {T} tables of dim {d} is {(T + 1) * d} wide")
            out.append(Layer("dcnv2", name, stage, (int(raw["width"]),), int(raw["layers"]), int(raw["low_rank"])))
        else:
            raise ConfigError(src, where + ".kind", f"the reference step builds mlp, dot and dcnv2 layers, not {kind!r}")
    bottom = [l for l in out if l.stage == "bottom"]
    top = [l for l in out if l.stage == "top"]
    if not bottom or any(l.kind != "mlp" for l in bottom):
        raise ConfigError(src, "dense.layers", "the reference step needs a bottom stage of mlp layers")
    if not top or top[0].kind not in ("dot", "dcnv2") or any(l.kind != "mlp" for l in top[1:]):
        raise ConfigError(src, "dense.layers", "the reference step needs a top stage: an interaction, then mlp layers")
    if bottom[-1].widths[-1] != d:
        raise ConfigError(src, "dense.layers", f"the bottom MLP must end at the embedding dim {d}")
    width = _interaction_width(top[0], T, d)
    for l in top[1:]:
        if l.widths[0] != width:
            raise ConfigError(src, "dense.layers", f"layer {l.name!r} takes {l.widths[0]} inputs; the previous layer gives {width}")
        width = l.widths[-1]
    if width != 1:
        raise ConfigError(src, "dense.layers", "the last top layer must output one logit")
    for a, b in zip(bottom[:-1], bottom[1:]):
        if b.widths[0] != a.widths[-1]:
            raise ConfigError(src, "dense.layers", f"layer {b.name!r} takes {b.widths[0]} inputs; the previous layer gives {a.widths[-1]}")
    return tuple(bottom + top)


def _interaction_width(layer: Layer, T: int, d: int) -> int:
    F = T + 1
    return F * (F - 1) // 2 + d if layer.kind == "dot" else layer.widths[0]


def model_dict(spec: Spec, *, index_bytes: float = INDEX_BYTES, param_bytes: float = 4.0) -> dict:
    """The model config (data/models layout) of a spec, so the cost model sees the same model."""
    layers = []
    for l in spec.layers:
        if l.kind == "mlp":
            layers.append(dict(kind="mlp", name=l.name, stage=l.stage, input=l.widths[0], widths=list(l.widths[1:])))
        elif l.kind == "dot":
            layers.append(dict(kind="dot", name=l.name, stage=l.stage, features=l.widths[0], dim=l.widths[1]))
        else:
            layers.append(dict(kind="dcnv2", name=l.name, stage=l.stage, width=l.widths[0], layers=l.layers,
                               low_rank=l.rank))
    act = {"fp32": 4, "bf16": 2, "fp8": 1}[spec.dense_dtype]
    return dict(name=spec.name, global_batch=spec.global_batch, dense_dtype=spec.dense_dtype,
                param_bytes=param_bytes, activation_bytes=act, dense_optimizer=spec.dense_optimizer,
                embeddings=dict(dim=spec.dim, bytes_per_element=4 if spec.emb_dtype == "fp32" else 2,
                                optimizer=spec.emb_optimizer, index_bytes=index_bytes, names=list(spec.tables),
                                rows=list(spec.rows), pooling=list(spec.pooling)),
                dense=dict(layers=layers))


def cost_model(spec: Spec, **kw) -> RankingModel:
    """The perfmodel RankingModel of exactly this reference spec (int32 indices, fp32 master weights)."""
    return parse_model(model_dict(spec, **kw), f"reference spec {spec.name}")


# ------------------------------------------------------------------------------------- params

def init_dense(spec: Spec, key) -> dict:
    """Dense parameters (fp32 master weights), a dict layer name -> arrays."""
    params = {}
    for layer in spec.layers:
        key, sub = jax.random.split(key)
        if layer.kind == "mlp":
            ks = jax.random.split(sub, len(layer.widths) - 1)
            params[layer.name] = {
                "w": [jax.random.normal(k, (a, b), jnp.float32) * np.sqrt(2.0 / (a + b))
                      for k, a, b in zip(ks, layer.widths[:-1], layer.widths[1:])],
                "b": [jnp.zeros((b,), jnp.float32) for b in layer.widths[1:]]}
        elif layer.kind == "dcnv2":
            W, r = layer.widths[0], layer.rank
            ks = jax.random.split(sub, 2 * layer.layers)
            params[layer.name] = {
                "u": [jax.random.normal(ks[2 * i], (W, r), jnp.float32) / np.sqrt(W) for i in range(layer.layers)],
                "v": [jax.random.normal(ks[2 * i + 1], (r, W), jnp.float32) / np.sqrt(r) for i in range(layer.layers)],
                "b": [jnp.zeros((W,), jnp.float32) for _ in range(layer.layers)]}
    return params


def init_tables(spec: Spec, key) -> list:
    ks = jax.random.split(key, spec.T)
    dt = DTYPES[spec.emb_dtype]
    bound = 1.0 / np.sqrt(spec.dim)
    return [jax.random.uniform(k, (r, spec.dim), jnp.float32, -bound, bound).astype(dt) for k, r in zip(ks, spec.rows)]


def init_emb_state(spec: Spec, rows: int, width: int):
    """Optimizer state of `rows` embedding rows `width` wide."""
    if spec.emb_optimizer == "rowwise_adagrad":
        return {"acc": jnp.zeros((rows,), jnp.float32)}
    if spec.emb_optimizer == "adam":
        return {"m": jnp.zeros((rows, width), jnp.float32), "v": jnp.zeros((rows, width), jnp.float32),
                "t": jnp.zeros((), jnp.float32)}
    return {}


def dense_optimizer(spec: Spec) -> optax.GradientTransformation:
    return {"sgd": optax.sgd, "adagrad": optax.adagrad, "adam": optax.adam}[spec.dense_optimizer](spec.lr)


def make_batch(spec: Spec, key, batch: int | None = None) -> dict:
    """Synthetic inputs: dense features, uniform indices [B, sum P] (table t in its columns), labels."""
    B = batch or spec.global_batch
    k1, k2, k3 = jax.random.split(key, 3)
    cols = [jax.random.randint(k, (B, p), 0, r, INDEX_DTYPE)
            for k, p, r in zip(jax.random.split(k2, spec.T), spec.pooling, spec.rows)]
    return {"x": jax.random.normal(k1, (B, spec.dense_in), jnp.float32),
            "idx": jnp.concatenate(cols, axis=1),
            "y": jax.random.bernoulli(k3, 0.5, (B,)).astype(jnp.float32)}


def index_columns(spec: Spec) -> list[tuple[int, int]]:
    """(start, stop) of each table's columns in the batch's index matrix."""
    starts = np.concatenate([[0], np.cumsum(spec.pooling)]).astype(int)
    return [(int(a), int(b)) for a, b in zip(starts[:-1], starts[1:])]


# ------------------------------------------------------------------------------------ the math

def embedding_bag(table, idx):
    """Pooled rows of a fixed-size bag per sample: a gather and a segment sum. idx [B, P] -> [B, d].

    Indices out of range (>= rows, used as padding) read zeros."""
    B, P = idx.shape
    vecs = table.at[idx.reshape(-1)].get(mode="fill", fill_value=0)
    seg = jnp.repeat(jnp.arange(B), P, total_repeat_length=B * P)
    return jax.ops.segment_sum(vecs, seg, num_segments=B, indices_are_sorted=True)


@jax.custom_vjp
def gram(x):
    """Z = X X^T per sample ([B, F, d] -> [B, F, F])."""
    return jnp.einsum("bfd,bgd->bfg", x, x)


def _gram_fwd(x):
    return gram(x), x


def _gram_bwd(x, g):
    # dZ/dX for Z = X X^T is (dZ + dZ^T) X: one GEMM of the forward's size, as the cost model counts
    return (jnp.einsum("bfg,bgd->bfd", g + jnp.swapaxes(g, 1, 2), x),)


gram.defvjp(_gram_fwd, _gram_bwd)


def _mlp(p, h, dt, last_linear: bool):
    n = len(p["w"])
    for i, (w, b) in enumerate(zip(p["w"], p["b"])):
        h = h @ w.astype(dt) + b.astype(dt)
        if not (last_linear and i == n - 1):
            h = jax.nn.relu(h)
    return h


def dense_forward(spec: Spec, dense: dict, x, emb):
    """Logits [b] from dense features [b, n] and pooled embeddings [b, T, d]."""
    dt = DTYPES[spec.dense_dtype]
    h = x.astype(dt)
    emb = emb.astype(dt)
    bottom = [l for l in spec.layers if l.stage == "bottom"]
    top = [l for l in spec.layers if l.stage == "top"]
    for layer in bottom:
        with jax.named_scope(layer.name):
            h = _mlp(dense[layer.name], h, dt, last_linear=False)
    inter = top[0]
    b = h.shape[0]
    with jax.named_scope(inter.name):
        if inter.kind == "dot":
            X = jnp.concatenate([h[:, None, :], emb], axis=1)
            F = X.shape[1]
            li, lj = np.tril_indices(F, -1)
            z = gram(X)[:, li, lj]
            h = jnp.concatenate([h, z], axis=1)
        else:
            p = dense[inter.name]
            x0 = jnp.concatenate([h, emb.reshape(b, -1)], axis=1)
            h = x0
            for u, v, bb in zip(p["u"], p["v"], p["b"]):
                h = x0 * ((h @ u.astype(dt)) @ v.astype(dt) + bb.astype(dt)) + h
    mlps = top[1:]
    for i, layer in enumerate(mlps):
        with jax.named_scope(layer.name):
            h = _mlp(dense[layer.name], h, dt, last_linear=(i == len(mlps) - 1))
    return h[:, 0].astype(jnp.float32)


def bce_sum(logits, y):
    return jnp.sum(optax.sigmoid_binary_cross_entropy(logits, y))


def sparse_update(spec: Spec, table, state, ids, g_rows, width=None):
    """Fused optimizer update of the rows `ids` [N] (>= rows: padding, dropped) with per-lookup
    gradients g_rows [N, w]. Duplicate rows are summed first (one update per distinct row).
    width: the true row width (row-wise Adagrad's mean over it), [N] or a number."""
    R = table.shape[0]
    lr, eps = spec.lr, spec.eps
    if spec.emb_optimizer == "sgd":
        return table.at[ids].add((-lr * g_rows).astype(table.dtype), mode="drop"), state
    N = ids.shape[0]
    uniq, inv = jnp.unique(ids, size=N, fill_value=R, return_inverse=True)
    g = jax.ops.segment_sum(g_rows.astype(jnp.float32), inv.reshape(-1), num_segments=N)
    # state is scattered first and read back after: an in-place update (a read before a write of
    # the same buffer in one program makes XLA:CPU copy the whole buffer)
    if spec.emb_optimizer == "rowwise_adagrad":
        w = width if width is not None else table.shape[1]
        if not isinstance(w, (int, float)):
            w = jax.ops.segment_max(w, inv.reshape(-1), num_segments=N)
        acc = state["acc"].at[uniq].add(jnp.sum(g * g, axis=1) / w, mode="drop")
        G = acc.at[uniq].get(mode="fill", fill_value=1.0)
        upd = -lr * g / (jnp.sqrt(G) + eps)[:, None]
        return table.at[uniq].add(upd.astype(table.dtype), mode="drop"), {"acc": acc}
    # lazy Adam: moments of the touched rows only
    b1, b2 = 0.9, 0.999
    t = state["t"] + 1.0
    m = state["m"].at[uniq].multiply(b1, mode="drop").at[uniq].add((1 - b1) * g, mode="drop")
    v = state["v"].at[uniq].multiply(b2, mode="drop").at[uniq].add((1 - b2) * g * g, mode="drop")
    mu = m.at[uniq].get(mode="fill", fill_value=0)
    nu = v.at[uniq].get(mode="fill", fill_value=0)
    upd = -lr * (mu / (1 - b1 ** t)) / (jnp.sqrt(nu / (1 - b2 ** t)) + eps)
    return table.at[uniq].add(upd.astype(table.dtype), mode="drop"), {"m": m, "v": v, "t": t}


def dense_table_update(spec: Spec, table, state, grad):
    """Update of a whole table from its dense gradient (data-parallel tables)."""
    lr, eps = spec.lr, spec.eps
    if spec.emb_optimizer == "sgd":
        return (table - lr * grad).astype(table.dtype), state
    if spec.emb_optimizer == "rowwise_adagrad":
        acc = state["acc"] + jnp.mean(grad * grad, axis=1)
        return (table - lr * grad / (jnp.sqrt(acc) + eps)[:, None]).astype(table.dtype), {"acc": acc}
    b1, b2 = 0.9, 0.999
    t = state["t"] + 1.0
    touched = jnp.any(grad != 0, axis=1, keepdims=True)          # lazy: untouched rows keep their moments
    m = jnp.where(touched, b1 * state["m"] + (1 - b1) * grad, state["m"])
    v = jnp.where(touched, b2 * state["v"] + (1 - b2) * grad * grad, state["v"])
    upd = jnp.where(touched, -lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps), 0.0)
    return (table + upd).astype(table.dtype), {"m": m, "v": v, "t": t}


# ------------------------------------------------------------------------- single-device step

def init_state(spec: Spec, key) -> dict:
    k1, k2 = jax.random.split(key)
    dense = init_dense(spec, k1)
    tables = init_tables(spec, k2)
    return {"dense": dense, "dense_opt": dense_optimizer(spec).init(dense), "tables": tables,
            "emb_opt": [init_emb_state(spec, r, spec.dim) for r in spec.rows]}


def make_step(spec: Spec):
    """The single-device training step: (state, batch) -> (state, loss). Pure; jit it."""
    opt = dense_optimizer(spec)
    cols = index_columns(spec)

    def step(state, batch):
        idx = batch["idx"]
        B = idx.shape[0]
        with jax.named_scope("emb_fwd"):
            pooled = jnp.stack([embedding_bag(t, idx[:, a:b]) for t, (a, b) in zip(state["tables"], cols)], axis=1)

        def loss_fn(dense, pooled):
            return bce_sum(dense_forward(spec, dense, batch["x"], pooled), batch["y"]) / B

        loss, (g_dense, g_pooled) = jax.value_and_grad(loss_fn, argnums=(0, 1))(state["dense"], pooled)
        with jax.named_scope("optimizer"):
            upd, dense_opt = opt.update(g_dense, state["dense_opt"], state["dense"])
            dense = optax.apply_updates(state["dense"], upd)
        tables, emb_opt = [], []
        with jax.named_scope("emb_bwd"):
            for t, (a, b) in enumerate(cols):
                P = b - a
                g_rows = jnp.repeat(g_pooled[:, t, :], P, axis=0, total_repeat_length=B * P)
                tb, st = sparse_update(spec, state["tables"][t], state["emb_opt"][t], idx[:, a:b].reshape(-1), g_rows)
                tables.append(tb)
                emb_opt.append(st)
        return {"dense": dense, "dense_opt": dense_opt, "tables": tables, "emb_opt": emb_opt}, loss

    return step


def make_timed_step(spec: Spec):
    """The single-device step as two jitted programs, for timing: (1) lookups, dense forward,
    backward and optimizer; (2) the fused embedding update, with the tables donated.

    One program that both gathers from a table and scatters into it makes XLA:CPU copy the whole
    table (twice) every step, a cost no accelerator runtime pays and the cost model does not charge;
    as two programs each table is updated in place. Same math as make_step."""
    opt = dense_optimizer(spec)
    cols = index_columns(spec)

    @jax.jit
    def dense_part(tables, dense, dense_opt, batch):
        idx = batch["idx"]
        B = idx.shape[0]
        pooled = jnp.stack([embedding_bag(t, idx[:, a:b]) for t, (a, b) in zip(tables, cols)], axis=1)

        def loss_fn(dense, pooled):
            return bce_sum(dense_forward(spec, dense, batch["x"], pooled), batch["y"]) / B
        loss, (g_dense, g_pooled) = jax.value_and_grad(loss_fn, argnums=(0, 1))(dense, pooled)
        upd, dense_opt = opt.update(g_dense, dense_opt, dense)
        return optax.apply_updates(dense, upd), dense_opt, g_pooled, loss

    @partial(jax.jit, donate_argnums=(0, 1))
    def emb_part(tables, emb_opt, idx, g_pooled):
        B = idx.shape[0]
        new_t, new_o = [], []
        for t, (a, b) in enumerate(cols):
            g_rows = jnp.repeat(g_pooled[:, t, :], b - a, axis=0, total_repeat_length=B * (b - a))
            tb, st = sparse_update(spec, tables[t], emb_opt[t], idx[:, a:b].reshape(-1), g_rows)
            new_t.append(tb)
            new_o.append(st)
        return new_t, new_o

    def step(state, batch):
        dense, dense_opt, g_pooled, loss = dense_part(state["tables"], state["dense"], state["dense_opt"], batch)
        tables, emb_opt = emb_part(state["tables"], state["emb_opt"], batch["idx"], g_pooled)
        return {"dense": dense, "dense_opt": dense_opt, "tables": tables, "emb_opt": emb_opt}, loss

    return step


# ------------------------------------------------------------------------------ sharded layout

@dataclass
class Layout:
    """Static placement of a plan's tables on D devices, and the per-device index maps.

    Group "p" holds table_wise / column_wise shards, "rw" row_wise tables, "dp" data_parallel ones.
    Arrays with a leading D axis differ per device and are passed sharded over the mesh.
    """

    D: int
    kinds: tuple[str, ...]             # per table: its sharding type
    p_tables: tuple[int, ...] = ()
    rw_tables: tuple[int, ...] = ()
    dp_tables: tuple[int, ...] = ()
    # group p
    shards: list = field(default_factory=list)      # (table, col0, width, rank, slot)
    S: int = 0                                        # slots per device
    W: int = 0                                        # widest shard
    R: int = 0                                        # storage rows per device
    Q: int = 0                                        # index columns received per device
    L: int = 0                                        # lookups per device (per sample)
    E: int = 0                                        # output columns sent per device (per sample)
    send_map: np.ndarray | None = None                # [D, Q] local index column for destination r
    fmap: np.ndarray | None = None                    # [len(p_tables), d] position in the [D * E] received
    dev: dict = field(default_factory=dict)           # per-device arrays, leading axis D
    # group rw
    rw_block: tuple[int, ...] = ()
    rw_offset: tuple[int, ...] = ()
    rw_R: int = 0
    # group dp
    dp_offset: tuple[int, ...] = ()
    dp_R: int = 0


def make_layout(spec: Spec, plan: Plan, D: int) -> Layout:
    """Where each table (shard) lives and how its indices and outputs travel; see the module doc."""
    kinds = []
    for name in spec.tables:
        st = plan.tables[name].sharding_type
        if st not in SUPPORTED_TYPES:
            raise ConfigError("plan", f"tables.{name}.sharding_type",
                              f"the reference step shards {', '.join(SUPPORTED_TYPES)}, not {st!r}")
        kinds.append(st)
    lay = Layout(D=D, kinds=tuple(kinds))
    lay.p_tables = tuple(t for t, k in enumerate(kinds) if k in ("table_wise", "column_wise"))
    lay.rw_tables = tuple(t for t, k in enumerate(kinds) if k == "row_wise")
    lay.dp_tables = tuple(t for t, k in enumerate(kinds) if k == "data_parallel")
    d = spec.dim

    # ---- group p: shards, slots, storage rows
    per_dev = [[] for _ in range(D)]
    for t in lay.p_tables:
        ranks = plan.tables[spec.tables[t]].ranks
        k = len(ranks)
        w = d // k
        for j, r in enumerate(ranks):
            per_dev[r].append((t, j * w, w))
    if lay.p_tables:
        lay.S = max(1, max(len(s) for s in per_dev))
        lay.W = max(w for s in per_dev for _, _, w in s)
        lay.R = max(sum(spec.rows[t] for t, _, _ in s) for s in per_dev) or 1
        tabs = [sorted({t for t, _, _ in s}) for s in per_dev]
        Qr = [sum(spec.pooling[t] for t in ts) for ts in tabs]
        lay.Q = max(1, max(Qr))
        Lr = [sum(spec.pooling[t] for t, _, _ in s) for s in per_dev]
        lay.L = max(1, max(Lr))
        lay.E = max(1, max(sum(w for _, _, w in s) for s in per_dev))
        # the local index matrix of group p: table t's columns, in p_tables order
        pcols, start = {}, 0
        for t in lay.p_tables:
            pcols[t] = start
            start += spec.pooling[t]
        send = np.zeros((D, lay.Q), np.int32)
        qpos = [{} for _ in range(D)]
        for r in range(D):
            q = 0
            for t in tabs[r]:
                qpos[r][t] = q
                send[r, q:q + spec.pooling[t]] = np.arange(pcols[t], pcols[t] + spec.pooling[t])
                q += spec.pooling[t]
        lay.send_map = send
        off = np.zeros((D, lay.S), np.int32)
        lk_col = np.zeros((D, lay.L), np.int32)
        lk_slot = np.zeros((D, lay.L), np.int32)
        lk_valid = np.zeros((D, lay.L), bool)
        emap = np.zeros((D, lay.E), np.int32)
        row_w = np.ones((D, lay.R), np.float32)
        fmap = np.zeros((len(lay.p_tables), d), np.int32)
        prow = {t: i for i, t in enumerate(lay.p_tables)}
        for r in range(D):
            row, l, e = 0, 0, 0
            for s, (t, c0, w) in enumerate(per_dev[r]):
                lay.shards.append((t, c0, w, r, s, row))
                off[r, s] = row
                row_w[r, row:row + spec.rows[t]] = w
                row += spec.rows[t]
                P = spec.pooling[t]
                lk_col[r, l:l + P] = qpos[r][t] + np.arange(P)
                lk_slot[r, l:l + P] = s
                lk_valid[r, l:l + P] = True
                l += P
                emap[r, e:e + w] = s * lay.W + np.arange(w)
                fmap[prow[t], c0:c0 + w] = r * lay.E + e + np.arange(w)
                e += w
        lay.fmap = fmap
        lay.dev = dict(off=off, lk_col=lk_col, lk_slot=lk_slot, lk_valid=lk_valid, emap=emap, row_w=row_w)

    # ---- group rw: every device holds block r of each table's rows
    blocks, offs, o = [], [], 0
    for t in lay.rw_tables:
        blk = -(-spec.rows[t] // D)
        blocks.append(blk)
        offs.append(o)
        o += blk
    lay.rw_block, lay.rw_offset, lay.rw_R = tuple(blocks), tuple(offs), o
    # ---- group dp: replicas, concatenated
    offs, o = [], 0
    for t in lay.dp_tables:
        offs.append(o)
        o += spec.rows[t]
    lay.dp_offset, lay.dp_R = tuple(offs), o
    return lay


def _cols_of(spec: Spec, tables) -> np.ndarray:
    cols = index_columns(spec)
    out = [np.arange(*cols[t]) for t in tables]
    return np.concatenate(out).astype(np.int32) if out else np.zeros((0,), np.int32)


# --------------------------------------------------------------------- sharded state (pack/unpack)

def pack_state(spec: Spec, lay: Layout, dense_plan: str, state: dict) -> dict:
    """Lay a single-device state out as the sharded step stores it (numpy; global arrays)."""
    D, d = lay.D, spec.dim
    tables = [np.asarray(t, np.float32) for t in state["tables"]]
    out = {}
    if lay.p_tables:
        tab = np.zeros((D, lay.R, lay.W), np.float32)
        for t, c0, w, r, s, row in lay.shards:
            tab[r, row:row + spec.rows[t], :w] = tables[t][:, c0:c0 + w]
        out["p_table"] = tab.reshape(D * lay.R, lay.W)
        out["p_opt"] = _stack_opt(spec, D, lay.R, lay.W)
    if lay.rw_tables:
        tab = np.zeros((D, lay.rw_R, d), np.float32)
        for t, blk, o in zip(lay.rw_tables, lay.rw_block, lay.rw_offset):
            for r in range(D):
                part = tables[t][r * blk:(r + 1) * blk]
                tab[r, o:o + len(part)] = part
        out["rw_table"] = tab.reshape(D * lay.rw_R, d)
        out["rw_opt"] = _stack_opt(spec, D, lay.rw_R, d)
    if lay.dp_tables:
        out["dp_table"] = np.concatenate([tables[t] for t in lay.dp_tables], axis=0)
        out["dp_opt"] = jax.tree_util.tree_map(np.asarray, init_emb_state(spec, lay.dp_R, d))
    dense = jax.tree_util.tree_map(np.asarray, state["dense"])
    if dense_plan == "fully_sharded":
        flat, _ = _flatten(dense)
        n = -(-flat.size // D) * D
        out["dense"] = np.pad(flat, (0, n - flat.size))
        out["dense_opt"] = jax.tree_util.tree_map(np.asarray, dense_optimizer(spec).init(jnp.asarray(out["dense"])))
    else:
        out["dense"] = dense
        out["dense_opt"] = jax.tree_util.tree_map(np.asarray, dense_optimizer(spec).init(state["dense"]))
    dt = np.dtype(DTYPES[spec.emb_dtype])
    for k in ("p_table", "rw_table", "dp_table"):
        if k in out:
            out[k] = out[k].astype(dt)
    return out


def _stack_opt(spec, D, R, W):
    one = init_emb_state(spec, R, W)
    return {k: (np.zeros((D * v.shape[0],) + v.shape[1:], np.float32) if v.ndim else np.zeros((), np.float32))
            for k, v in one.items()}


def unpack_tables(spec: Spec, lay: Layout, packed: dict) -> list[np.ndarray]:
    """The full tables from a sharded state (inverse of pack_state's table layout)."""
    D, d = lay.D, spec.dim
    out = [np.zeros((r, d), np.float32) for r in spec.rows]
    if lay.p_tables:
        tab = np.asarray(packed["p_table"], np.float32).reshape(D, lay.R, lay.W)
        for t, c0, w, r, s, row in lay.shards:
            out[t][:, c0:c0 + w] = tab[r, row:row + spec.rows[t], :w]
    if lay.rw_tables:
        tab = np.asarray(packed["rw_table"], np.float32).reshape(D, lay.rw_R, d)
        for t, blk, o in zip(lay.rw_tables, lay.rw_block, lay.rw_offset):
            for r in range(D):
                n = len(out[t][r * blk:(r + 1) * blk])
                out[t][r * blk:r * blk + n] = tab[r, o:o + n]
    if lay.dp_tables:
        tab = np.asarray(packed["dp_table"], np.float32)
        for t, o in zip(lay.dp_tables, lay.dp_offset):
            out[t] = tab[o:o + spec.rows[t]]
    return out


def unpack_dense(spec: Spec, dense_plan: str, packed_dense, like: dict):
    if dense_plan == "fully_sharded":
        _, unflat = _flatten(jax.tree_util.tree_map(np.asarray, like))
        return unflat(np.asarray(packed_dense))
    return packed_dense


def _flatten(tree):
    """(every leaf of `tree` as one float32 vector, the function that splits such a vector back)."""
    leaves = jax.tree_util.tree_leaves(tree)
    flat = np.concatenate([np.asarray(x, np.float32).reshape(-1) for x in leaves]) if leaves else np.zeros(0)
    return flat, _unflattener(tree)[0]


def _unflattener(like):
    """(split a flat vector into `like`'s leaf shapes, numpy or jnp alike; the vector's length).
    `like` may hold arrays or ShapeDtypeStructs."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    shapes = [tuple(np.shape(x)) for x in leaves]
    sizes = [int(np.prod(s)) for s in shapes]

    def unflat(v):
        parts, o = [], 0
        for s, n in zip(shapes, sizes):
            parts.append(v[o:o + n].reshape(s))
            o += n
        return jax.tree_util.tree_unflatten(treedef, parts)
    return unflat, sum(sizes)


# ------------------------------------------------------------------------------ sharded step

def _gather_params(shard, axis: str, grad_dtype):
    """All-gather of the flat parameter shard; its transpose reduce-scatters the gradient in
    `grad_dtype` (the plan's gradient precision), as fully sharded data parallelism does."""
    @jax.custom_vjp
    def gather(s):
        return jax.lax.all_gather(s, axis, tiled=True)

    def fwd(s):
        return gather(s), None

    def bwd(_, g):
        rs = jax.lax.psum_scatter(g.astype(grad_dtype), axis, scatter_dimension=0, tiled=True)
        return (rs.astype(shard.dtype),)
    gather.defvjp(fwd, bwd)
    return gather(shard)


def make_sharded_step(spec: Spec, plan: Plan, mesh, axis: str = "d"):
    """(step, layout): step(state, batch, maps) -> (state, loss), the training step sharded as `plan`
    places the tables, over the 1-D `mesh`. `state` comes from pack_state, `maps` from
    device_maps(layout); batch arrays are sharded over the batch. Jit the step with the shardings
    from `shardings(...)`.
    """
    D = mesh.shape[axis]
    lay = make_layout(spec, plan, D)
    dense_mode = plan.dense
    if dense_mode not in ("replicated", "fully_sharded"):
        raise ConfigError("plan", "dense", f"the reference step runs replicated or fully_sharded dense, not {dense_mode!r}")
    B, d = spec.global_batch, spec.dim
    if B % D:
        raise ConfigError("model", "global_batch", f"{B} does not split over {D} devices")
    b = B // D
    a2a_dt = DTYPES[plan.a2a_precision]
    grad_dt = DTYPES[plan.grad_precision]
    emb_dt = DTYPES[spec.emb_dtype]
    opt = dense_optimizer(spec)
    p_cols = _cols_of(spec, lay.p_tables)
    rw_cols = _cols_of(spec, lay.rw_tables)
    dp_cols = _cols_of(spec, lay.dp_tables)
    # table order of the features after concatenating the groups
    order = list(lay.p_tables) + list(lay.rw_tables) + list(lay.dp_tables)
    perm = np.argsort(np.asarray(order)).astype(np.int32)
    # row-wise: per index column, its table's block size, storage offset and table slot
    rw_blk = np.concatenate([[blk] * spec.pooling[t] for t, blk in zip(lay.rw_tables, lay.rw_block)]).astype(np.int32) \
        if lay.rw_tables else np.zeros(0, np.int32)
    rw_off = np.concatenate([[o] * spec.pooling[t] for t, o in zip(lay.rw_tables, lay.rw_offset)]).astype(np.int32) \
        if lay.rw_tables else np.zeros(0, np.int32)
    rw_tab = np.concatenate([[i] * spec.pooling[t] for i, t in enumerate(lay.rw_tables)]).astype(np.int32) \
        if lay.rw_tables else np.zeros(0, np.int32)
    dp_off = np.concatenate([[o] * spec.pooling[t] for t, o in zip(lay.dp_tables, lay.dp_offset)]).astype(np.int32) \
        if lay.dp_tables else np.zeros(0, np.int32)
    dp_tab = np.concatenate([[i] * spec.pooling[t] for i, t in enumerate(lay.dp_tables)]).astype(np.int32) \
        if lay.dp_tables else np.zeros(0, np.int32)
    n_rw, n_dp = len(lay.rw_tables), len(lay.dp_tables)
    dense_like = jax.eval_shape(lambda: init_dense(spec, jax.random.PRNGKey(0)))
    unflat, n_dense = _unflattener(dense_like)

    def local(state, batch, maps):
        x, y, idx = batch["x"], batch["y"], batch["idx"]
        maps = {k: v[0] for k, v in maps.items()}
        me = jax.lax.axis_index(axis)
        new = dict(state)

        # ---------------- forward lookups (not differentiated: their gradient feeds the fused update)
        pooled_p = partial_rw = pooled_dp = None
        if lay.p_tables:
            with jax.named_scope("input_dist"):
                send = idx[:, p_cols][:, lay.send_map]                  # [b, D, Q]: destination r's columns
                recv = jax.lax.all_to_all(jnp.swapaxes(send, 0, 1), axis, 0, 0, tiled=True).reshape(B, lay.Q)
            with jax.named_scope("emb_fwd"):
                ids_p = recv[:, maps["lk_col"]]                            # [B, L]
                rows_p = jnp.where(maps["lk_valid"], ids_p + maps["off"][maps["lk_slot"]], lay.R)
                vecs = state["p_table"].at[rows_p].get(mode="fill", fill_value=0)  # [B, L, W]
                pooled_p = jax.ops.segment_sum(jnp.swapaxes(vecs, 0, 1), maps["lk_slot"], num_segments=lay.S)
        if lay.rw_tables:
            with jax.named_scope("input_dist"):
                ids_rw = jax.lax.all_gather(idx[:, rw_cols], axis, tiled=True)     # [B, P_rw]
            with jax.named_scope("emb_fwd"):
                owner = ids_rw // rw_blk
                rows_rw = jnp.where(owner == me, ids_rw - me * rw_blk + rw_off, lay.rw_R)
                vecs = state["rw_table"].at[rows_rw].get(mode="fill", fill_value=0)  # [B, P_rw, d]
                partial_rw = jax.ops.segment_sum(jnp.swapaxes(vecs, 0, 1), rw_tab, num_segments=n_rw)
        if lay.dp_tables:
            with jax.named_scope("emb_fwd"):
                rows_dp = idx[:, dp_cols] + dp_off
                vecs = state["dp_table"].at[rows_dp].get(mode="fill", fill_value=0)  # [b, P_dp, d]
                pooled_dp = jax.ops.segment_sum(jnp.swapaxes(vecs, 0, 1), dp_tab, num_segments=n_dp)

        # ---------------- dense forward + backward, with the output distribution inside
        def loss_fn(dense, pooled_p, partial_rw, pooled_dp):
            feats = []
            if pooled_p is not None:
                with jax.named_scope("output_dist"):
                    flat = jnp.swapaxes(pooled_p, 0, 1).reshape(B, lay.S * lay.W)[:, maps["emap"]]   # [B, E]
                    out = jax.lax.all_to_all(flat.astype(a2a_dt).reshape(D, b, lay.E), axis, 0, 0, tiled=True)
                    got = jnp.swapaxes(out.reshape(D, b, lay.E), 0, 1).reshape(b, D * lay.E)
                    feats.append(got[:, lay.fmap].astype(emb_dt))               # [b, T_p, d]
            if partial_rw is not None:
                with jax.named_scope("output_dist"):
                    part = jnp.swapaxes(partial_rw, 0, 1).astype(a2a_dt)        # [B, T_rw, d]
                    feats.append(jax.lax.psum_scatter(part, axis, scatter_dimension=0, tiled=True).astype(emb_dt))
            if pooled_dp is not None:
                feats.append(jnp.swapaxes(pooled_dp, 0, 1))
            emb = jnp.concatenate(feats, axis=1)[:, perm] if len(feats) > 1 else feats[0][:, perm]
            if dense_mode == "fully_sharded":
                with jax.named_scope("param_gather"):
                    full = checkpoint_name(_gather_params(dense, axis, grad_dt), "fsdp_params")
                params = unflat(full[:n_dense])
            else:
                params = dense
            return bce_sum(dense_forward(spec, params, x, emb), y) / B

        dense_in = state["dense"]
        if dense_mode == "replicated":   # a per-device copy, so that its gradient is this device's
            dense_in = jax.lax.pcast(dense_in, axis, to="varying")
        if dense_mode == "fully_sharded":
            # ZeRO-3: the gathered parameters are not kept for the backward; it gathers them again
            loss_fn_ = jax.checkpoint(loss_fn, policy=jax.checkpoint_policies.save_anything_except_these_names("fsdp_params"))
        else:
            loss_fn_ = loss_fn
        loss, grads = jax.value_and_grad(loss_fn_, argnums=(0, 1, 2, 3))(dense_in, pooled_p, partial_rw, pooled_dp)
        g_dense, g_p, g_rw, g_dp = grads

        # ---------------- dense gradient sync and optimizer
        if dense_mode == "replicated":
            with jax.named_scope("dense_sync"):
                g_dense = jax.tree_util.tree_map(
                    lambda g: jax.lax.psum(g.astype(grad_dt), axis).astype(jnp.float32), g_dense)
        with jax.named_scope("optimizer"):
            upd, new["dense_opt"] = opt.update(g_dense, state["dense_opt"], state["dense"])
            new["dense"] = optax.apply_updates(state["dense"], upd)

        # ---------------- fused embedding updates
        with jax.named_scope("emb_bwd"):
            if lay.p_tables:
                g_rows = g_p[maps["lk_slot"]]                                 # [L, B, W]
                ids = jnp.swapaxes(rows_p, 0, 1).reshape(-1)
                width = maps["row_w"].at[ids].get(mode="fill", fill_value=1.0)
                new["p_table"], new["p_opt"] = sparse_update(
                    spec, state["p_table"], state["p_opt"], ids, g_rows.reshape(-1, lay.W), width)
            if lay.rw_tables:
                g_rows = g_rw[rw_tab]                                          # [P_rw, B, d]
                ids = jnp.swapaxes(rows_rw, 0, 1).reshape(-1)
                new["rw_table"], new["rw_opt"] = sparse_update(
                    spec, state["rw_table"], state["rw_opt"], ids, g_rows.reshape(-1, d))
            if lay.dp_tables:
                g_rows = g_dp[dp_tab]                                          # [P_dp, b, d]
                ids = jnp.swapaxes(rows_dp, 0, 1).reshape(-1)
                dense_g = jnp.zeros((lay.dp_R, d), jnp.float32).at[ids].add(g_rows.reshape(-1, d).astype(jnp.float32))
                with jax.named_scope("dp_sync"):
                    dense_g = jax.lax.psum(dense_g.astype(grad_dt), axis).astype(jnp.float32)
                new["dp_table"], new["dp_opt"] = dense_table_update(spec, state["dp_table"], state["dp_opt"], dense_g)
        with jax.named_scope("loss"):
            loss = jax.lax.psum(loss, axis)
        return new, loss

    specs = state_specs(spec, lay, dense_mode, axis)
    from jax.sharding import PartitionSpec as P
    batch_spec = {"x": P(axis), "y": P(axis), "idx": P(axis)}
    map_spec = {k: P(axis) for k in lay.dev}
    step = jax.shard_map(local, mesh=mesh, in_specs=(specs, batch_spec, map_spec), out_specs=(specs, P()))
    return step, lay


def state_specs(spec: Spec, lay: Layout, dense_mode: str, axis: str = "d") -> dict:
    """PartitionSpecs of the sharded state (pytree matching pack_state's output)."""
    from jax.sharding import PartitionSpec as P
    rep, sh = P(), P(axis)
    out = {}
    dense_like = jax.eval_shape(lambda: init_dense(spec, jax.random.PRNGKey(0)))
    if dense_mode == "fully_sharded":
        out["dense"] = sh
        out["dense_opt"] = jax.tree_util.tree_map(lambda x: sh if x.ndim else rep,
                                                  jax.eval_shape(dense_optimizer(spec).init, jax.ShapeDtypeStruct((8,), jnp.float32)))
    else:
        out["dense"] = jax.tree_util.tree_map(lambda _: rep, dense_like)
        out["dense_opt"] = jax.tree_util.tree_map(lambda _: rep, jax.eval_shape(dense_optimizer(spec).init, dense_like))
    opt_spec = lambda: {k: (rep if k == "t" else sh) for k in init_emb_state(spec, 1, 1)}
    if lay.p_tables:
        out["p_table"], out["p_opt"] = sh, opt_spec()
    if lay.rw_tables:
        out["rw_table"], out["rw_opt"] = sh, opt_spec()
    if lay.dp_tables:
        out["dp_table"] = rep
        out["dp_opt"] = {k: rep for k in init_emb_state(spec, 1, 1)}
    return out


def device_maps(lay: Layout) -> dict:
    """The per-device index maps (numpy, leading axis D) the sharded step takes as `maps`."""
    return {k: np.asarray(v) for k, v in lay.dev.items()}


def abstract_inputs(spec: Spec, plan: Plan, mesh, axis: str = "d"):
    """ShapeDtypeStructs (with shardings) of (state, batch, maps): compile without allocating."""
    from jax.sharding import NamedSharding, PartitionSpec as P
    D = mesh.shape[axis]
    lay = make_layout(spec, plan, D)
    specs = state_specs(spec, lay, plan.dense, axis)
    shapes = jax.eval_shape(lambda: _packed_shapes(spec, lay, plan.dense))
    st = jax.tree_util.tree_map(lambda s, p: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=NamedSharding(mesh, p)),
                                shapes, specs)
    B = spec.global_batch
    bs = NamedSharding(mesh, P(axis))
    batch = {"x": jax.ShapeDtypeStruct((B, spec.dense_in), jnp.float32, sharding=bs),
             "y": jax.ShapeDtypeStruct((B,), jnp.float32, sharding=bs),
             "idx": jax.ShapeDtypeStruct((B, sum(spec.pooling)), INDEX_DTYPE, sharding=bs)}
    maps = {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=bs) for k, v in lay.dev.items()}
    return st, batch, maps


def _packed_shapes(spec: Spec, lay: Layout, dense_mode: str):
    """The packed state as zeros of the right shapes (traced by eval_shape only: never allocated)."""
    D, d = lay.D, spec.dim
    dt = DTYPES[spec.emb_dtype]
    out = {}
    dense = init_dense(spec, jax.random.PRNGKey(0))
    if dense_mode == "fully_sharded":
        n = sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(dense))
        flat = jnp.zeros((-(-n // D) * D,), jnp.float32)
        out["dense"], out["dense_opt"] = flat, dense_optimizer(spec).init(flat)
    else:
        out["dense"], out["dense_opt"] = dense, dense_optimizer(spec).init(dense)

    def opt(R, W):
        one = init_emb_state(spec, R, W)
        return {k: (jnp.zeros((D * v.shape[0],) + v.shape[1:], v.dtype) if v.ndim else v) for k, v in one.items()}
    if lay.p_tables:
        out["p_table"], out["p_opt"] = jnp.zeros((D * lay.R, lay.W), dt), opt(lay.R, lay.W)
    if lay.rw_tables:
        out["rw_table"], out["rw_opt"] = jnp.zeros((D * lay.rw_R, d), dt), opt(lay.rw_R, d)
    if lay.dp_tables:
        out["dp_table"], out["dp_opt"] = jnp.zeros((lay.dp_R, d), dt), init_emb_state(spec, lay.dp_R, d)
    return out
