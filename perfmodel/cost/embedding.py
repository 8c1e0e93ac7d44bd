"""Embedding costs per device: lookups, fused backward + update, storage, and the traffic of the
input (indices) and output (pooled vectors) distributions, for every sharding type at once.

Each table's work is split over devices by its share under each sharding type
(TorchRec semantics, B global batch, b = B / D local batch):

  data_parallel   every device holds the table and looks up its own b samples
  table_wise      one device holds it and looks up all B samples       (share = placement, one-hot)
  column_wise     k devices hold dim / k columns each, all B samples    (share = placement, 1 / k each)
  row_wise        every device holds rows / D, looks up ~B pool / D     (share 1 / D); partial sums for
                  all B samples are reduce-scattered
  row_wise over n < D devices (PlanArrays.row_shards: HugeCTR's planner splits a table over a
                  subset): each holds rows / n (share = placement, 1 / n each), looks up its ~B pool
                  / n ids, and its partial sums reach every device in the all-to-all, k partial rows
                  per sample (k = row_shards), summed there, as HugeCTR's embedding collection does:
                  k = n for a flat split; over m whole scale-up domains (hier_auto) each domain first
                  reduce-scatters its partial sums of all B samples inside (as table_row_wise does),
                  and k = m
  table_row_wise  the L devices of one scale-up domain hold rows / L  (share = domain placement / L;
                  a partial last domain's L' devices rows / L' each);
                  pooled: a reduce-scatter inside the domain, then (its result is the input) an
                  all-to-all out of it; two collectives one after the other, as TorchRec runs them
                  (TwRwPooledEmbeddingDist: the cross-host all-to-all of the intra-host
                  reduce-scatter's output), so their times add

Per-device sums are linear in the placement, so they are matrix products P^T W over tables:
cheap, exactly one-hot-consistent, and differentiable in a relaxed placement.

On a partial system (hardware.System.partial) every device's peers per level and its domain's size
are its own (hardware.peers_per_level, domain_chips): numbers on a full system, [D] arrays on a
partial one, in the same formulas.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..hardware import System, domain_chips, peers_per_level
from ..pytree import pytree
from ..plan import CW, DP, RW, TW, TWRW, PlanArrays
from ..workload import RankingModel
from . import access
from .arrays import add_at, lead, xp_of
from .compute import gather_efficiency, llc_factor


@pytree
@dataclass(frozen=True)
class EmbeddingCosts:
    fwd_s: jnp.ndarray            # [D] lookup + pooled-output write
    bwd_s: jnp.ndarray            # [D] gradient scatter + fused optimizer update
    out_send: jnp.ndarray         # [D, K] bytes of the output all-to-all first reaching level l
    out_recv: jnp.ndarray         # [D, K]
    in_send: jnp.ndarray          # [D, K] bytes of indices
    in_recv: jnp.ndarray          # [D, K]
    rw_bytes: jnp.ndarray         # buffer per chip of the row-wise reduce-scatter (all devices)
    tr_bytes: jnp.ndarray         # [D] buffer of the table-row-wise reduce-scatter inside the domain
    dp_grad_bytes: jnp.ndarray    # gradient bytes of data-parallel tables, all-reduced
    hbm_bytes: jnp.ndarray        # [D] weights + optimizer state in HBM
    host_bytes: jnp.ndarray       # [D] weights + optimizer state in host DRAM
    pooled_bytes: jnp.ndarray     # per sample: embedding outputs a device's dense part consumes


# Placements up to this many entries (tables x devices) are summed over tables without a matrix
# product (_over_tables)
SMALL_PLACEMENT = 4096


def _over_tables(P, W):
    """P^T W: [..., T, N] placement shares and [..., T, J] per-table terms -> [..., N, J] per device. On small
    placements (SMALL_PLACEMENT) as J multiply-and-sums, so that the program has no matrix product:
    XLA:CPU hands those to oneDNN, which builds its GEMM kernels at a program's first call (25 ms of
    a new process's first plan on MLPerf / h100-16); the batch scorer runs faster on h100-16 (2.6 ms
    a batch of 1,024 plans instead of 3.5) and about as fast on mtia300-64 (7.7 against 7.3). Large ones
    (prod-856 / h100-256: 856 x 256) as the product, which reads P once, not J times: 200 ms a batch
    of 256 plans instead of 424."""
    xp = xp_of(P, W)
    if P.shape[-2] * P.shape[-1] > SMALL_PLACEMENT:
        return xp.swapaxes(P, -1, -2) @ W
    return _sums(P, W) if xp is np else _sums_traced(P, W)


def _sums(P, W):
    """P^T W as J multiply-and-sums over tables."""
    xp = xp_of(P, W)
    return xp.stack([xp.sum(P * W[..., :, j, None], axis=-2) for j in range(W.shape[-1])], axis=-1)


@jax.custom_vjp
def _sums_traced(P, W):
    """_sums, differentiated by matrix products: the derivative of J multiply-and-sums is J
    [..., T, N] products and sums, which a gradient over a batch of plans streams through memory J
    times where a product reads them once; a gradient program runs many times, so oneDNN's kernels,
    built at its first call, pay for themselves (the hard evaluation keeps no product)."""
    return _sums(P, W)


def _sums_fwd(P, W):
    return _sums(P, W), (P, W)


def _sums_bwd(res, ct):
    P, W = res
    return W @ jnp.swapaxes(ct, -1, -2), P @ ct


_sums_traced.defvjp(_sums_fwd, _sums_bwd)


def _domain_sums(x, size: int):
    """[..., D] -> [..., D]: for each device, the sum of x over its domain of `size` devices (the
    last one partial where size does not divide D: summed as if filled with zeros)."""
    xp, D = xp_of(x), x.shape[-1]
    pad = -D % size
    if pad:
        x = xp.concatenate([x, xp.zeros(x.shape[:-1] + (pad,), x.dtype)], axis=-1)
    sums = xp.repeat(x.reshape(x.shape[:-1] + ((D + pad) // size, size)).sum(-1), size, axis=-1)
    return sums[..., :D] if pad else sums


def _per_domain(x, system: System):
    """[..., H, F] per innermost domain -> [..., D, F] per device."""
    xp = xp_of(x)
    if not system.uneven_domains:
        return xp.repeat(x, system.domain_size, axis=-2)
    sizes = np.asarray(system.domain_sizes)
    if xp is np:
        return np.repeat(x, sizes, axis=-2)
    return xp.repeat(x, sizes, axis=-2, total_repeat_length=system.num_chips)


SORT_POSITION_BYTES = 4.0     # the sort carries (index, position in the batch) pairs: position as int32
COUNT_BYTES = 4.0             # the deduplication writes each distinct id with an int32 count / offset


def key_preparation(chip, tb, lookups, unique, at):
    """(sort, dedupe) seconds [T] of preparing a step's ids for the backward scatter and the
    optimizer, the key preparation kernels a DLRM-DCNv2 step runs (radix sort, label-and-count and
    swizzle, 2.7 %, 2.7 % and 1 % of GPU time in a public HugeCTR trace on 8 x B200, docs/sources.md
    [criteo-profile]):

    sort    a sort of the n = lookups (index, position) records of r = index_bytes + 4 bytes,
            O(n log n): log_k n passes, each reading and writing every record at the gather
            efficiency of r-byte rows,
                t = 2 n (log2 n / log2 k) r / (B_hbm e_hbm gamma(r)),
            the records' own working set n r cached as in compute.llc_factor. k = max(2, U) is the
            fan-out of a pass on U compute units: one core merges two ways (a comparison sort, as
            XLA:CPU's), a parallel device distributes the records among at least as many buckets
            as it has units (a radix or sample sort, as cub's 256-way digits)
    dedupe  one pass over the sorted records that labels runs of equal ids and writes each of the
            u distinct ids with its count: n r read + u (index_bytes + 4) written, same cache rule;
            u falls with the access distribution's skew (access.distinct_per_batch)
    `at(bytes, row_bytes)` is the caller's gather-rate time of `bytes` read as rows of row_bytes."""
    xp = xp_of(lookups)
    rec = tb.index_bytes + SORT_POSITION_BYTES
    n = xp.maximum(lookups, 2.0)
    passes = xp.log2(n) / xp.log2(xp.maximum(chip.compute_units, 2.0))
    cached = llc_factor(chip, n * rec)
    sort = at(2.0 * n * passes * rec, rec) * cached
    dedupe = at(n * rec + unique * (tb.index_bytes + COUNT_BYTES), rec) * cached
    return sort, dedupe


def table_parts(chip, model: RankingModel, width, cache_ratio, mass=None):
    """Parts of one whole table's lookup and update time at the global batch, rows `width` wide:
    (fwd_mem, fwd_host, bwd_mem, bwd_host, keys), seconds, [T] each. The access distribution
    (cost/access.py: a Zipf law over the rows ever accessed, a measured top-share curve, a
    multi-hot expansion; uniform over all rows by default) sets three shares (`mass`: the top
    cache_ratio of the rows' share of the lookups, access.top_mass, where the caller has it):

    hit       the lookups the device's memory serves: an HBM cache of the fraction cache_ratio of
              the rows, most frequent first, hits access.hbm_cache_hit = mass(cache_ratio) **
              access_skew (cache_ratio ** access_skew under uniform access, the legacy rule)
    llc       of those, the share the last-level cache serves: it holds the hottest C_t / row bytes
              rows (access.llc_share; under uniform access min(1, C_t / W), W = cache_ratio x rows x
              bytes per row with its optimizer state). The tables' lookups run as one fused kernel,
              so they share the cache: C_t is the table's traffic share of it (access.llc_bytes_of),
              model-wide, so every per-device sum stays linear in the placement. The cache starts
              each lookup kernel cold (the layers between two lookup kernels stream more bytes than
              it holds), so at most the re-referenced share 1 - u / lookups hits
    unique    the distinct rows a step touches, u (access.distinct_per_batch; under uniform access
              rows (1 - exp(-lookups / rows)))

    fwd_mem   hit x lookups x row bytes read at gather efficiency gamma(row bytes), the llc share at
              the cache's bandwidth (access.llc_time_factor)
    fwd_host  the other 1 - hit of those bytes over the host link (at its bandwidth)
    bwd_mem   the gradient scatter (same bytes as the lookups, same cache share) plus the fused
              optimizer update of the u distinct rows: read + write of the row and its optimizer
              state, once each, so from HBM (bwd_host: the same for the host share)
    keys      the key preparation, sort + dedupe (key_preparation)
    """
    tb = model.tables
    xp = xp_of(tb.rows, width, cache_ratio)
    B = model.global_batch
    lookups = B * tb.pooling
    hbm = chip.hbm_Bps * chip.hbm_eff
    mass = access.top_mass(tb, cache_ratio) if mass is None else mass
    hit = mass ** tb.access_skew                                      # access.hbm_cache_hit
    unique = access.distinct_per_batch(tb, B)
    rb = width * tb.bytes_per_element
    srow = width * tb.opt_bytes_per_element + tb.opt_bytes_per_row
    # the cache starts each lookup kernel cold (the dense layers, the pooled outputs and the
    # all-to-all buffers between two lookup kernels stream more bytes than it holds), so only a
    # re-reference within the step can hit: at most 1 - u / lookups of the lookups
    reuse = 1.0 - unique / xp.maximum(lookups, 1e-30)
    cached = access.llc_time_factor(chip, xp.minimum(access.llc_share(chip, tb, rb + srow, mass), xp.maximum(reuse, 0.0)))

    def at(nbytes, row_bytes):
        return nbytes / (hbm * gather_efficiency(chip, row_bytes))

    fwd_mem = hit * at(lookups * rb, rb) * cached
    fwd_host = (1.0 - hit) * lookups * rb / chip.host_link_Bps      # the host link's own rate
    upd = 2.0 * unique * (rb + srow)
    bwd_mem = fwd_mem + hit * at(upd, rb + srow)                       # each distinct row once: no re-reference
    bwd_host = fwd_host + (1.0 - hit) * upd / chip.host_link_Bps
    sort, dedupe = key_preparation(chip, tb, lookups, unique, at)
    return fwd_mem, fwd_host, bwd_mem, bwd_host, sort + dedupe


def table_seconds(chip, model: RankingModel, width, cache_ratio, mass=None):
    """(forward, backward) seconds of one whole table's lookups at the global batch, rows `width`
    wide: the parts of table_parts summed (the backward includes the key preparation)."""
    fwd_mem, fwd_host, bwd_mem, bwd_host, keys = table_parts(chip, model, width, cache_ratio, mass)
    return fwd_mem + fwd_host, bwd_mem + bwd_host + keys


def row_wise_subset(pa: PlanArrays, D: int):
    """[..., T] the row_wise share of the tables that span fewer than D devices (PlanArrays.row_shards),
    or None where every row_wise table spans every device (the plans a search makes)."""
    if pa.row_shards is None:
        return None
    xp = xp_of(pa.shard_type)
    return pa.shard_type[..., RW] * xp.where(pa.row_shards < D - 0.5, 1.0, 0.0)


def hierarchical(pa: PlanArrays, D: int, holders=None):
    """[..., T] the share of row_wise_subset's tables reduced inside their domains first (their
    placement holds more devices than the partial sums they send: row_shards), or None. holders:
    the devices each placement row holds, where already counted."""
    sub = row_wise_subset(pa, D)
    if sub is None:
        return None
    xp = xp_of(pa.shard_type)
    if holders is None:
        holders = xp.sum(xp.where(pa.placement > 0, 1.0, 0.0), axis=-1)
    return sub * xp.where(holders > pa.row_shards + 0.5, 1.0, 0.0)


def embedding_costs(system: System, model: RankingModel, pa: PlanArrays, a2a_bytes, grad_bytes) -> EmbeddingCosts:
    """The embedding costs of one plan (jax) or, in numpy, of a batch of plans (PlanArrays with a
    leading batch axis; every output then has it too: cost.arrays)."""
    tb, chip = model.tables, system.chip
    xp = xp_of(pa.shard_type)
    D, L = system.num_chips, system.domain_size
    sizes = [lv.size for lv in system.levels]
    K = len(sizes)
    first_reached = peers_per_level(system)      # peers first reached per level: [K], or [D, K] (partial)
    Ld = domain_chips(system)                    # chips in each device's domain: L, or [D] (partial)
    Ld_col = Ld[:, None] if np.ndim(Ld) else Ld
    B = model.global_batch
    b = B / D
    S = pa.shard_type
    s_dp, s_tw, s_cw, s_rw, s_tr = (S[..., i] for i in (DP, TW, CW, RW, TWRW))
    s_sub = row_wise_subset(pa, D)            # row-wise over k < D devices; s_rw keeps the every-device part
    if s_sub is not None:
        s_rw = s_rw - s_sub
    s_p = s_tw + s_cw
    k = pa.cw_shards
    c = pa.cache_ratio + s_dp * (1.0 - pa.cache_ratio)   # data-parallel tables stay in HBM
    over = lambda x: xp.sum(x, axis=-1)                  # a sum over tables: [..., T] -> [...]

    wb = tb.bytes_per_element
    row = tb.dim * wb
    out_rows = tb.output_per_sample()
    hbm = chip.hbm_Bps * chip.hbm_eff
    mass = access.top_mass(tb, c)         # the lookups the HBM cache serves: the same at every width
    f_full, b_full = table_seconds(chip, model, tb.dim, c, mass)
    f_cw, b_cw = table_seconds(chip, model, tb.dim / k, c, mass)
    out_write = B * out_rows * row / hbm                # pooled outputs at full batch, full width

    full = tb.rows * tb.bytes_per_row()
    cw_full = full + tb.rows * tb.opt_bytes_per_row * (k - 1.0)   # row-wise state is per shard
    store_P = s_tw * full + s_cw * cw_full
    e = out_rows * tb.dim * lead(a2a_bytes, S[..., 0])   # output bytes per sample per table
    seq = tb.sequence
    e_pool, e_seq = e * (1.0 - seq), e * seq         # pooled sums vs. sequence rows
    g = tb.pooling * tb.index_bytes                  # index bytes per sample per table
    per_dest = s_tw + s_cw * k                       # index copies: every column shard needs them all

    P = pa.placement
    cols = [
        # a column-wise table's placement row holds 1/k on each of its k devices, and each of
        # them runs one shard's whole lookup (f_cw, b_cw: width dim / k at the full batch): k x
        s_tw * (f_full + out_write) + s_cw * (k * f_cw + out_write),  # 0 forward seconds
        s_tw * (b_full + out_write) + s_cw * (k * b_cw + out_write),  # 1 backward seconds
        store_P * c, store_P * (1.0 - c),                             # 2, 3 HBM / host bytes
        s_p * e,                                                      # 4 output bytes per sample
        per_dest * g,                                                 # 5 index bytes per sample
    ]
    if s_sub is not None:
        # row-wise over a subset, by the same placement: the k holders' shares are the placement's
        # 1/k; each looks up its rows and writes partial sums of all B samples (k x the table's
        # pooled output), and sends them all: k x e per sample
        k_rw = pa.row_shards
        cols = [x + y for x, y in zip(cols, [
            s_sub * (f_full + k_rw * out_write), s_sub * (b_full + k_rw * out_write),
            s_sub * full * c, s_sub * full * (1.0 - c), s_sub * k_rw * e, s_sub * g])]
        # 6: reduced inside each domain first, every holder's domain reduce-scatters the partial sums
        # of all B samples (its own collective on the innermost level, as table_row_wise's): e on
        # every holder, its placement share 1/n times n holders
        holders = xp.sum(xp.where(P > 0, 1.0, 0.0), axis=-1)
        cols.append(hierarchical(pa, D, holders) * e * holders)
    # ---- per-device sums as one matrix product per placement kind: [D, F] = P^T [T, F]
    VP = _over_tables(P, xp.stack(cols, axis=-1))
    tr_sub = None if s_sub is None else VP[..., 6] * B
    def per_table_row_wise(size):        # [T, 7]: what one device of a domain of `size` chips holds
        return xp.stack([
            s_tr * (f_full / size + out_write), s_tr * (b_full / size + out_write),
            s_tr * full * c / size, s_tr * full * (1.0 - c) / size,
            s_tr * e_pool, s_tr * e_seq, s_tr * g,
        ], axis=-1)
    WQ = per_table_row_wise(L)
    by_domain = _over_tables(pa.domain_placement, WQ)                     # [H, 7]
    if system.uneven_domains:           # the partial last domain's devices hold larger shares
        last = system.domain_sizes[-1]
        tail = _over_tables(pa.domain_placement[..., -1:], per_table_row_wise(last))
        by_domain = xp.concatenate([by_domain[..., :-1, :], tail], axis=-2)
    VQ = _per_domain(by_domain, system)                                   # [D, 7]: the domain's share, per device
    totQ = xp.sum(WQ, axis=-2)
    dp_bwd = 2.0 * tb.rows * tb.bytes_per_row() / hbm  # DP: each device applies the dense update
    uni_fwd = over(s_rw * (f_full / D + out_write) + s_dp * (f_full + out_write) / D)
    uni_bwd = over(s_rw * (b_full / D + out_write) + s_dp * ((b_full + out_write) / D + dp_bwd))
    per_device = lambda x: lead(x, VP[..., 0])          # a per-plan value against [..., D]
    fwd = VP[..., 0] + VQ[..., 0] + per_device(uni_fwd) + chip.launch_s
    bwd = VP[..., 1] + VQ[..., 1] + per_device(uni_bwd) + chip.launch_s
    hbm_bytes = VP[..., 2] + VQ[..., 2] + per_device(over(s_rw * full * c / D + s_dp * full))
    host_bytes = VP[..., 3] + VQ[..., 3] + per_device(over(s_rw * full * (1.0 - c) / D))

    # ---- output distribution: bytes per device first reaching each level, [D, K]
    # table/column-wise: the holder sends each device its b samples; a device receives from the
    # holders in its level-l domain but not its level-(l-1) domain: domain sums of v = P^T (s e)
    v = VP[..., 4]
    out_send = (v * b)[..., :, None] * first_reached
    recv_cols, prev = [], v
    for l, size in enumerate(sizes):
        sent = s_p * e if s_sub is None else s_p * e + s_sub * pa.row_shards * e
        cur = _domain_sums(v, size) if l < K - 1 else xp.zeros_like(v) + per_device(over(sent))
        recv_cols.append((cur - prev) * b)
        prev = cur
    out_recv = xp.stack(recv_cols, axis=-1)
    # table-row-wise, pooled: a reduce-scatter inside the domain of the partial sums of all B samples
    # (tr_bytes per device, its own collective), then each device's B / L share out of the domain
    tr_bytes = VQ[..., 4] * B if s_sub is None else VQ[..., 4] * B + tr_sub
    beyond = D - Ld_col                                # devices outside the own domain
    remote_frac = first_reached[..., 1:] / (np.maximum(beyond, 1) if np.ndim(beyond) else max(beyond, 1))
    if K > 1:
        s_out = VQ[..., 4] * (B / Ld) * (D - Ld) / D
        r_out = (per_device(totQ[..., 4]) - VQ[..., 4]) * b
        out_send = add_at(out_send, (slice(1, None),), s_out[..., :, None] * remote_frac)
        out_recv = add_at(out_recv, (slice(1, None),), r_out[..., :, None] * remote_frac)
    # sequence rows (row-wise and table-row-wise): no partial sums; a holder with share x of the
    # table sends x B pool dim bytes spread over all sample owners
    dest = first_reached / D
    e_seq_rw = over(s_rw * e_seq)
    seq_send = VQ[..., 5] * B / Ld + per_device(e_seq_rw * B / D)
    out_send = out_send + seq_send[..., :, None] * dest
    out_recv = out_recv + lead(e_seq_rw, out_recv) * b * dest
    out_recv = add_at(out_recv, (0,), VQ[..., 5] * b * (Ld - 1) / Ld)
    if K > 1:
        out_recv = add_at(out_recv, (slice(1, None),),
                          ((per_device(totQ[..., 5]) - VQ[..., 5]) * b)[..., :, None] * remote_frac)
    rw_bytes = B * over(s_rw * e_pool)               # pooled row-wise: reduce-scatter buffer per chip

    # ---- input distribution (indices), destinations spread uniformly over the peers
    frac = first_reached / max(D - 1, 1)
    send_tot = b * over((per_dest + s_rw + s_tr) * g) * (D - 1) / D
    recv_tot = VP[..., 5] * (B - b) + per_device(over(s_rw * g) * (B - b) / D) + VQ[..., 6] * (B - b) / Ld
    in_send = xp.broadcast_to(per_device(send_tot), recv_tot.shape)[..., :, None] * frac
    in_recv = recv_tot[..., :, None] * frac

    dp_grad = over(s_dp * tb.rows * tb.dim) * grad_bytes
    pooled = xp_of(tb.dim).sum(out_rows * tb.dim)
    return EmbeddingCosts(fwd, bwd, out_send, out_recv, in_send, in_recv, rw_bytes, tr_bytes, dp_grad,
                          hbm_bytes, host_bytes, pooled)


def _replica_shares(system: System, pa: PlanArrays, per_table):
    """[D] each device's share of per-table quantities `per_table` ([..., T]) over the shards it
    holds: table- and column-wise and row-wise subsets by their placement, table-row-wise by its
    domain's, row-wise over all devices 1 / D each; data-parallel tables not at all (a 2D plan
    all-reduces their gradients over every chip with the dense ones)."""
    xp = xp_of(pa.shard_type)
    S = pa.shard_type
    D, L = system.num_chips, system.domain_size
    s_sub = row_wise_subset(pa, D)
    s_sub = 0.0 if s_sub is None else s_sub
    held = _over_tables(pa.placement, ((S[..., TW] + S[..., CW] + s_sub) * per_table)[..., None])
    by_domain = _per_domain(_over_tables(pa.domain_placement, (S[..., TWRW] * per_table / L)[..., None]), system)
    everywhere = xp.sum((S[..., RW] - s_sub) * per_table, axis=-1) / D
    return held[..., 0] + by_domain[..., 0] + lead(everywhere, held[..., 0])


def replica_sync_bytes(system: System, model: RankingModel, pa: PlanArrays, grad_bytes):
    """[D] bytes each device of a 2D plan's sharding group (hardware.Replication) all-reduces with
    the replicas of its shards at a synchronization: with sync_every = 1 the gradients of the rows
    the whole step touched (the union of the replicas' distinct rows, access.distinct_per_batch at
    the global batch: the group's batch x replicas), rows x dim at the gradient precision; with
    sync_every = k > 1 the shards' weights and optimizer state, HBM and host alike (TorchRec's
    DMPCollection.sync averages them). Data-parallel tables are not here: their gradients are
    all-reduced over every chip with the dense ones."""
    rep, tb = system.replication, model.tables
    xp = xp_of(pa.shard_type)
    if rep.sync_every == 1:
        touched = access.distinct_per_batch(tb, model.global_batch * rep.replicas)
        per_table = touched * tb.dim * lead(grad_bytes, pa.shard_type[..., 0])
    else:
        per_table = tb.rows * tb.bytes_per_row() + xp.zeros_like(pa.shard_type[..., 0])
    return _replica_shares(system, pa, per_table)


def replica_apply_seconds(system: System, model: RankingModel, pa: PlanArrays):
    """[D] seconds each device of a 2D plan's group spends, when the replicas sync every step
    (sync_every = 1), applying the gradients of the rows the other replicas touched and it did not:
    a synchronous step updates every row of the union, u(R b) - u(b) rows more than its own group's
    batch b touched (access.distinct_per_batch), each read and written with its optimizer state at
    the gather rate of HBM, as the fused update of table_parts. Zero when the replicas average
    their weights every k > 1 steps (each updates its own rows)."""
    rep, tb, chip = system.replication, model.tables, system.chip
    xp = xp_of(pa.shard_type)
    if rep.sync_every != 1:
        return xp.zeros(np.shape(pa.offload) + (system.num_chips,), np.float32)
    B = model.global_batch
    extra = access.distinct_per_batch(tb, B * rep.replicas) - access.distinct_per_batch(tb, B)
    row = tb.bytes_per_row()          # the row and its optimizer state
    per_table = 2.0 * xp.maximum(extra, 0.0) * row / (chip.hbm_Bps * chip.hbm_eff * gather_efficiency(chip, row))
    return _replica_shares(system, pa, per_table + xp.zeros_like(pa.shard_type[..., 0]))
