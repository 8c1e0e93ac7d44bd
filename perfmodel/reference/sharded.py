"""The reference step sharded over a 1-D mesh as a Plan places each table (jax.shard_map): the
layout, packing and unpacking of state, make_sharded_step."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.ad_checkpoint import checkpoint_name

from ..config import ConfigError
from ..plan import Plan
from .spec import DTYPES, INDEX_DTYPE, SUPPORTED_TYPES, Spec
from .step import (
    bce_sum,
    dense_forward,
    dense_optimizer,
    dense_table_update,
    index_columns,
    init_dense,
    init_emb_state,
    sparse_update,
)

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
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P
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
