"""Embedding costs per device: lookups, fused backward + update, storage, and the traffic of the
input (indices) and output (pooled vectors) distributions, for every sharding type at once.

Each table's work is split over devices by its share under each sharding type
(TorchRec semantics, B global batch, b = B / D local batch):

  data_parallel   every device holds the table and looks up its own b samples
  table_wise      one device holds it and looks up all B samples       (share = placement, one-hot)
  column_wise     k devices hold dim / k columns each, all B samples    (share = placement, 1 / k each)
  row_wise        every device holds rows / D, looks up ~B pool / D     (share 1 / D); partial sums for
                  all B samples are reduce-scattered
  table_row_wise  the L devices of one scale-up domain hold rows / L  (share = domain placement / L);
                  reduce-scatter inside the domain, then an all-to-all out of it

Per-device sums are linear in the placement, so they are matrix products P^T W over tables:
cheap, exactly one-hot-consistent, and differentiable in a relaxed placement.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp

from ..hardware import System
from ..plan import CW, DP, RW, TW, TWRW, PlanArrays
from ..workload import RankingModel
from .compute import gather_efficiency


@dataclass(frozen=True)
class EmbeddingCosts:
    fwd_s: jnp.ndarray            # [D] lookup + pooled-output write
    bwd_s: jnp.ndarray            # [D] gradient scatter + fused optimizer update
    out_send: jnp.ndarray         # [D, K] bytes of the output all-to-all first reaching level l
    out_recv: jnp.ndarray         # [D, K]
    in_send: jnp.ndarray          # [D, K] bytes of indices
    in_recv: jnp.ndarray          # [D, K]
    rw_bytes: jnp.ndarray         # buffer per chip of the row-wise reduce-scatter (all devices)
    dp_grad_bytes: jnp.ndarray    # gradient bytes of data-parallel tables, all-reduced
    hbm_bytes: jnp.ndarray        # [D] weights + optimizer state in HBM
    host_bytes: jnp.ndarray       # [D] weights + optimizer state in host DRAM
    pooled_bytes: jnp.ndarray     # per sample: embedding outputs a device's dense part consumes


def _domain_sums(x, size: int):
    """[T, D] -> [T, D]: for each device, the sum of x over its domain of `size` devices."""
    T, D = x.shape
    s = x.reshape(T, D // size, size).sum(-1, keepdims=True)
    return jnp.broadcast_to(s, (T, D // size, size)).reshape(T, D)


def embedding_costs(system: System, model: RankingModel, pa: PlanArrays, a2a_bytes, grad_bytes) -> EmbeddingCosts:
    tb, chip = model.tables, system.chip
    D, L = system.num_chips, system.domain_size
    sizes = [lv.size for lv in system.levels]
    K = len(sizes)
    first_reached = jnp.asarray([s - p for s, p in zip(sizes, [1] + sizes[:-1])], jnp.float32)  # peers per level
    B = model.global_batch
    b = B / D
    S = pa.shard_type
    s_dp, s_tw, s_cw, s_rw, s_tr = (S[:, i] for i in (DP, TW, CW, RW, TWRW))
    s_p = s_tw + s_cw
    k = pa.cw_shards
    c = jnp.where(s_dp > 0, 1.0, pa.cache_ratio)     # data-parallel tables stay in HBM

    wb = tb.bytes_per_element
    row = tb.dim * wb
    out_rows = tb.output_per_sample()
    lookups = B * tb.pooling
    hbm = chip.hbm_Bps * chip.hbm_eff
    hit = c ** tb.access_skew
    unique = tb.rows * (1.0 - jnp.exp(-lookups / tb.rows))     # distinct rows touched per batch
    state_row = tb.dim * tb.opt_bytes_per_element + tb.opt_bytes_per_row

    def read_s(nbytes, row_bytes):
        return nbytes * (hit / (hbm * gather_efficiency(chip, row_bytes)) + (1.0 - hit) / chip.host_link_Bps)

    def per_table(width):
        """(fwd, bwd) seconds of one whole table's work at full batch B with rows `width` elements wide."""
        rb = width * wb
        srow = state_row * width / tb.dim + tb.opt_bytes_per_row * (1.0 - width / tb.dim)
        fwd = read_s(lookups * rb, rb)
        bwd = read_s(lookups * rb, rb) + read_s(2.0 * unique * (rb + srow), rb + srow)
        return fwd, bwd

    f_full, b_full = per_table(tb.dim)
    f_cw, b_cw = per_table(tb.dim / k)
    out_write = B * out_rows * row / hbm                # pooled outputs at full batch, full width

    # ---- per-device work: P^T W for table/column-wise, domain placement for table-row-wise
    P = pa.placement
    Q = pa.domain_placement                          # [T, H]
    Qd = jnp.repeat(Q, L, axis=1)                    # [T, D]: share of the domain, per device of it
    dp_bwd = 2.0 * tb.rows * tb.bytes_per_row() / hbm  # DP: each device applies the dense update
    w_fwd_P = s_tw * (f_full + out_write) + s_cw * (f_cw + out_write)
    w_bwd_P = s_tw * (b_full + out_write) + s_cw * (b_cw + out_write)
    uni_fwd = jnp.sum(s_rw * (f_full / D + out_write) + s_dp * (f_full + out_write) / D)
    uni_bwd = jnp.sum(s_rw * (b_full / D + out_write) + s_dp * ((b_full + out_write) / D + dp_bwd))
    w_fwd_Q = s_tr * (f_full / L + out_write)
    w_bwd_Q = s_tr * (b_full / L + out_write)
    fwd = P.T @ w_fwd_P + Qd.T @ w_fwd_Q + uni_fwd + chip.launch_s
    bwd = P.T @ w_bwd_P + Qd.T @ w_bwd_Q + uni_bwd + chip.launch_s

    # ---- storage
    full = tb.rows * tb.bytes_per_row()
    cw_full = full + tb.rows * tb.opt_bytes_per_row * (k - 1.0)   # row-wise state is per shard
    store_P = s_tw * full + s_cw * cw_full
    hbm_bytes = (P.T @ (store_P * c) + Qd.T @ (s_tr * full * c / L)
                 + jnp.sum(s_rw * full * c / D + s_dp * full))
    host_bytes = (P.T @ (store_P * (1 - c)) + Qd.T @ (s_tr * full * (1 - c) / L)
                  + jnp.sum(s_rw * full * (1 - c) / D))

    # ---- output distribution (pooled vectors, at the all-to-all precision)
    e = out_rows * tb.dim * a2a_bytes                # bytes per sample per table
    send_p = (P.T @ (s_p * e)) * b                   # [D] per destination device
    out_send = send_p[:, None] * first_reached[None, :]
    recv_cols = []
    prev = P
    for l, size in enumerate(sizes):
        cur = _domain_sums(P, size) if l < K - 1 else jnp.ones_like(P)
        recv_cols.append(((cur - prev).T @ (s_p * e)) * b)
        prev = cur
    out_recv = jnp.stack(recv_cols, axis=1)
    if K > 1 or L > 1:
        # table-row-wise: reduce-scatter inside the domain, then the domain's B / L share out
        intra = (Qd.T @ (s_tr * e)) * B * (L - 1) / L
        out_send = out_send.at[:, 0].add(intra)
        out_recv = out_recv.at[:, 0].add(intra)
        if K > 1:
            remote_frac = first_reached[1:] / (D - L)
            s_out = (Qd.T @ (s_tr * e)) * (B / L) * (D - L) / D
            r_out = ((1.0 - Qd).T @ (s_tr * e)) * b
            out_send = out_send.at[:, 1:].add(s_out[:, None] * remote_frac[None, :])
            out_recv = out_recv.at[:, 1:].add(r_out[:, None] * remote_frac[None, :])
    rw_bytes = B * jnp.sum(s_rw * e)

    # ---- input distribution (indices), destinations spread uniformly over the peers
    g = tb.pooling * tb.index_bytes
    frac = first_reached / max(D - 1, 1)
    per_dest = s_tw + s_cw * k
    send_tot = b * jnp.sum((per_dest + s_rw + s_tr) * g) * (D - 1) / D
    recv_tot = (P.T @ (per_dest * g)) * (B - b) + jnp.sum(s_rw * g) * (B - b) / D + (Qd.T @ (s_tr * g)) * (B - b) / L
    in_send = jnp.broadcast_to(send_tot, (D,))[:, None] * frac[None, :]
    in_recv = recv_tot[:, None] * frac[None, :]

    dp_grad = jnp.sum(s_dp * tb.rows * tb.dim) * grad_bytes
    pooled = jnp.sum(out_rows * tb.dim)
    return EmbeddingCosts(fwd, bwd, out_send, out_recv, in_send, in_recv, rw_bytes, dp_grad,
                          hbm_bytes, host_bytes, pooled)
