"""The single-device reference DLRM step: parameters, embedding bags, the dense forward, the
optimizers, make_step and make_timed_step."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .spec import DTYPES, INDEX_DTYPE, Spec


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


