"""What a plan moves in one step: the bytes of each collective and of each memory stream, and how
long each collective holds the communication stream (priced by cost/collectives).

Collectives of a step (schedule.py runs them):

  input_dist   the indices' all-to-all (embedding.EmbeddingCosts.in_send / in_recv)
  output_dist  the pooled outputs' all-to-all, the row-wise reduce-scatter over all devices and the
               table-row-wise reduce-scatter inside each domain (before the all-to-all: their times add)
  grad_dist    the same in reverse: the all-to-all, and all-gathers in place of the reduce-scatters
  dense_sync   the dense gradients' sync (replicated: all-reduce; fully sharded: reduce-scatter;
               hybrid: reduce-scatter inside the domain, all-reduce of its 1/L share across domains),
               the all-reduce of data-parallel tables' gradients, each gradient bucket's and each
               overlap chunk's extra call, and a sharded dense part's parameter all-gathers

A collective runs only if some table needs it. Its expected time is P(used) x time(bytes | used),
with P(used) = 1 - prod_t (1 - s_t): exactly 0 or 1 for a discrete plan, smooth for a relaxed one
(latency terms fade in with the probability instead of jumping).

The HBM traffic of a collective (the bytes each chip sends and receives, the busiest device's) is
what contends with the compute beside it (cost/contention.py, schedule.py).

Pure functions of (System, RankingModel, PlanArrays) pieces: traced (jit, vmap, grad) or, in numpy,
of a batch of discrete plans with a leading batch axis (cost.arrays).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..hardware import System, domain_chips, replica_system, whole_system
from ..plan import COLLECTIVES, CW, DP, PRECISION_BYTES, RW, TW, TWRW, PlanArrays
from ..workload import RankingModel
from . import collectives as coll
from .arrays import lead, xp_of
from .embedding import (EmbeddingCosts, embedding_costs, hierarchical, replica_apply_seconds, replica_sync_bytes,
                        row_wise_subset)
from .smooth import hard_max

A2A, AR, RS, AG = (COLLECTIVES.index(k) for k in ("all_to_all", "all_reduce", "reduce_scatter", "all_gather"))


class Used(NamedTuple):
    """The probability that each embedding collective runs (1 - prod_t (1 - s_t))."""

    input: object        # the indices' all-to-all: any table not data-parallel
    a2a: object          # the output all-to-all: table-, column-, table-row-wise, sequence rows, row-wise subsets
    rw: object           # the row-wise reduce-scatter over all devices (pooled)
    tr: object           # the table-row-wise reduce-scatter inside each domain (pooled; hierarchical subsets)
    dp: object           # the all-reduce of data-parallel tables' gradients


class Traffic(NamedTuple):
    """The bytes of one plan's step (module docstring)."""

    emb: EmbeddingCosts  # per device: the embedding lookups' costs and the all-to-alls' volumes
    used: Used
    grad_bytes: object   # the dense gradients' bytes (at the gradient precision)
    param_bytes: object  # the dense parameters' bytes
    tr_moved: object     # [D] bytes the table-row-wise reduce-scatter sends (and receives) per device
    sent: dict           # collective phase -> bytes per device, the busiest device's (Breakdown.comm_bytes)
    hbm: dict            # collective phase -> HBM bytes a chip sends and receives, the busiest device's
    replica: object = None   # a 2D plan's group: [D] bytes each device syncs with its shards' replicas


def element_bytes(pa: PlanArrays):
    """(all-to-all, gradient) bytes per element: the precisions' expected widths."""
    xp = xp_of(pa.shard_type)
    prec = np.asarray(PRECISION_BYTES, np.float32)
    return xp.sum(pa.a2a_precision * prec, axis=-1), xp.sum(pa.grad_precision * prec, axis=-1)


def used(pa: PlanArrays, model: RankingModel, D: int) -> Used:
    """Which embedding collectives run, as probabilities (module docstring)."""
    xp = xp_of(pa.shard_type)
    S = pa.shard_type

    def any_of(s_t):
        return 1.0 - xp.prod(1.0 - s_t, axis=-1)
    sub = row_wise_subset(pa, D)      # row-wise over a subset: its partial sums go in the all-to-all
    sub = 0.0 if sub is None else sub
    hier = hierarchical(pa, D)        # ... and, reduced inside domains first, a domain reduce-scatter
    seq = model.tables.sequence
    return Used(any_of(1.0 - S[..., DP]),
                any_of(S[..., TW] + S[..., CW] + S[..., TWRW] + S[..., RW] * seq + sub),
                any_of(S[..., RW] * (1.0 - seq) - sub),
                any_of(S[..., TWRW] * (1.0 - seq) + (0.0 if hier is None else hier)),
                any_of(S[..., DP]))


def plan_traffic(system: System, model: RankingModel, pa: PlanArrays) -> Traffic:
    """The bytes of one plan's step (a batch of plans in numpy)."""
    xp = xp_of(pa.shard_type)
    D = system.num_chips
    a2a_b, grad_b = element_bytes(pa)
    emb = embedding_costs(system, model, pa, a2a_b, grad_b)
    if system.replication is not None:      # a synchronous 2D step applies the other replicas' rows too
        emb = dataclasses.replace(emb, bwd_s=emb.bwd_s + replica_apply_seconds(system, model, pa))
    u = used(pa, model, D)
    P_dense = model.dense.params()
    g_bytes = P_dense * grad_b
    p_bytes = P_dense * model.param_bytes
    Ld = domain_chips(system)                              # each device's domain: L, or [D] on a partial system
    tr_moved = emb.tr_bytes * (Ld - 1) / Ld                # [D] sent (and received) by the domain reduce-scatter
    out_bytes = (hard_max(xp.sum(xp.maximum(emb.out_send, emb.out_recv), axis=-1) + tr_moved, -1)
                 + emb.rw_bytes * (D - 1) / D)
    in_bytes = hard_max(xp.sum(xp.maximum(emb.in_send, emb.in_recv), axis=-1), -1)
    # the dense and data-parallel gradients are all-reduced over every chip, a 2D plan's groups too
    rep = system.replication
    Dw = whole_system(system).num_chips
    sync_bytes = 2.0 * (g_bytes + emb.dp_grad_bytes) * (Dw - 1) / Dw
    replica = None
    if rep is not None:
        R = rep.replicas
        replica = replica_sync_bytes(system, model, pa, grad_b)
        sync_bytes = sync_bytes + 2.0 * hard_max(replica, -1) * (R - 1) / R / rep.sync_every
    # bytes each chip sends and receives (its HBM traffic's measure): the busiest device's
    out_traffic = (hard_max(xp.sum(emb.out_send + emb.out_recv, axis=-1) + 2.0 * tr_moved, -1)
                   + 2.0 * emb.rw_bytes * (D - 1) / D)
    in_traffic = hard_max(xp.sum(emb.in_send + emb.in_recv, axis=-1), -1)
    sent = {"input_dist": in_bytes, "output_dist": out_bytes, "grad_dist": out_bytes, "dense_sync": sync_bytes}
    hbm = {"input_dist": in_traffic, "output_dist": out_traffic, "dense_sync": 2.0 * sync_bytes,
           "param_gather": 2.0 * p_bytes * (Dw - 1) / Dw}
    return Traffic(emb, u, g_bytes, p_bytes, tr_moved, sent, hbm, replica)


class CommTimes(NamedTuple):
    """Seconds each collective phase holds the communication stream (module docstring)."""

    input: object        # input_dist, all of it (its pipelined share runs during the previous step)
    output: object       # output_dist
    grad: object         # grad_dist
    sync: object         # dense_sync, the parameter all-gathers included
    gather: object       # the parameter all-gathers alone, forward and backward
    chunks: object       # the overlap chunks' extra calls (the output and gradient distributions each pay them)


def each(xp, fn, *columns) -> list:
    """fn(*args) for each args of zip(*columns): traced, one vmapped call over their stack (the
    program holds one copy of fn for all of them, and a smooth max inside stays each one's own); in
    numpy one call each (a batch's per-plan values carry its axis first)."""
    if xp is np:
        return [fn(*args) for args in zip(*columns)]
    out = jax.vmap(fn)(*(jnp.stack([jnp.broadcast_to(jnp.asarray(v, jnp.float32), jnp.shape(col[0])) for v in col])
                         for col in columns))
    return [out[i] for i in range(len(columns[0]))]


def collective_times(system: System, pa: PlanArrays, tr: Traffic, net: coll.Net, dmax) -> CommTimes:
    """How long each collective of a plan's step takes on `net` (coll.make_net), `dmax` its max
    over devices (exact, or smooth for a relaxed plan)."""
    xp = xp_of(pa.shard_type)
    D, L, K = system.num_chips, system.domain_size, len(system.levels)
    top = K - 1
    emb, u = tr.emb, tr.used
    algo = pa.algorithm

    def given(p, *volumes):       # the volumes given that the collective runs (probability p)
        safe = xp.maximum(p, 1e-6)
        return [v / lead(safe, v) for v in volumes]
    a2a, rs, ag, ar = (algo[..., i, :] for i in (A2A, RS, AG, AR))
    in_send, in_recv = given(u.input, emb.in_send, emb.in_recv)
    out_send, out_recv = given(u.a2a, emb.out_send, emb.out_recv)
    (rw,), (dp,) = given(u.rw, emb.rw_bytes), given(u.dp, emb.dp_grad_bytes)
    # table-row-wise (pooled): the reduce-scatter inside each domain (its slowest device's buffer)
    # before the all-to-all, and in the backward the all-gather after it
    (tr_max,) = given(u.tr, dmax(emb.tr_bytes))
    g_bytes, p_bytes = tr.grad_bytes, tr.param_bytes
    t_in, t_out = each(xp, lambda a, c: coll.all_to_all(net, a, c, a2a, dmax), (in_send, out_send), (in_recv, out_recv))
    c_rw, fsdp_rs = each(xp, lambda x: coll.reduce_scatter(net, x, 0, top, rs), (rw, g_bytes))
    c_rw_b, fsdp_ag = each(xp, lambda x: coll.all_gather(net, x, 0, top, ag), (rw, p_bytes))
    c_tr, hyb_rs = each(xp, lambda x: coll.reduce_scatter(net, x, 0, 0, rs), (tr_max, g_bytes))
    c_tr_b, hyb_ag = each(xp, lambda x: coll.all_gather(net, x, 0, 0, ag), (tr_max, p_bytes))
    ddp, c_dp = each(xp, lambda x: coll.all_reduce(net, x, 0, top, ar), (g_bytes, dp))
    hyb_ar = coll.all_reduce(net, g_bytes / L, 1, top, ar) if K > 1 else 0.0
    c_rep = 0.0
    rep = system.replication
    if rep is not None:        # a 2D plan's group: the dense sync spans every chip; the replicas sync
        ddp, c_dp, fsdp_rs, fsdp_ag, hyb_rs, hyb_ag, hyb_ar = _whole_sync(rep.whole, pa, tr, dp, ar, rs, ag)
        # it runs if some table is sharded (u.input: not data-parallel), as the index all-to-all
        c_rep = u.input * _replica_sync(system, pa, tr, dmax, ar, u.input) / rep.sync_every
    c_in = u.input * t_in
    a2a_out = u.a2a * t_out
    c_out = a2a_out + u.rw * c_rw + u.tr * c_tr
    c_gout = a2a_out + u.rw * c_rw_b + u.tr * c_tr_b
    c_dp = u.dp * c_dp

    m_rep, m_fsdp, m_hyb = pa.dense_mode[..., 0], pa.dense_mode[..., 1], pa.dense_mode[..., 2]
    c_sync_dense = m_rep * ddp + m_fsdp * fsdp_rs + m_hyb * (hyb_rs + hyb_ar)
    c_ag = m_fsdp * fsdp_ag + m_hyb * hyb_ag                 # parameter all-gather, forward and backward
    alpha_max = net.alpha[0]
    for a in net.alpha[1:]:
        alpha_max = xp.maximum(alpha_max, a)
    chunk_comm = (pa.overlap_chunks - 1.0) * (net.setup_s + alpha_max) * (D > 1)
    c_sync = c_sync_dense + c_dp + (pa.grad_buckets - 1.0) * (net.setup_s + alpha_max) * (D > 1) + c_ag + c_rep
    return CommTimes(c_in, c_out, c_gout, c_sync, c_ag, chunk_comm)


def _whole_sync(whole: System, pa: PlanArrays, tr: Traffic, dp, ar, rs, ag):
    """A 2D plan's dense sync on the whole system (every group's chips): the dense gradients'
    all-reduce, reduce-scatter and all-gather, the data-parallel tables' all-reduce and the hybrid
    mode's pieces, as collective_times prices them on one group of all chips."""
    net = coll.make_net(whole, pa.offload)
    top, L = len(whole.levels) - 1, whole.domain_size
    g_bytes, p_bytes = tr.grad_bytes, tr.param_bytes
    ddp, c_dp = (coll.all_reduce(net, x, 0, top, ar) for x in (g_bytes, dp))
    fsdp_rs, fsdp_ag = coll.reduce_scatter(net, g_bytes, 0, top, rs), coll.all_gather(net, p_bytes, 0, top, ag)
    hyb_rs, hyb_ag = coll.reduce_scatter(net, g_bytes, 0, 0, rs), coll.all_gather(net, p_bytes, 0, 0, ag)
    hyb_ar = coll.all_reduce(net, g_bytes / L, 1, top, ar) if top > 0 else 0.0
    return ddp, c_dp, fsdp_rs, fsdp_ag, hyb_rs, hyb_ag, hyb_ar


def _replica_sync(group: System, pa: PlanArrays, tr: Traffic, dmax, ar, p_used):
    """One synchronization of a 2D plan's replicas, given that it runs (probability p_used): the
    all-reduce of the busiest device's sync bytes (tr.replica) among one chip of each group, on the
    levels where the replicas sit (hardware.replica_system)."""
    replicas = replica_system(group)
    net = coll.make_net(replicas, pa.offload)
    volume = dmax(tr.replica) / xp_of(p_used).maximum(p_used, 1e-6)
    return coll.all_reduce(net, volume, 0, len(replicas.levels) - 1, ar)
