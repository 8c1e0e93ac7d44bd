"""How a step's streams overlap: the compute stream's tasks, the communication stream's
collectives (their durations from traffic.py), what each collective costs the compute beside it,
and the step's critical path (DESIGN.md, "Schedule").

Per device d, with collectives starting when every participant is ready (max over devices):

  input_dist  (indices all-to-all; pipelined fraction p runs during the previous step)
  bottom_fwd  (dense bottom stage, overlaps the input distribution)
  emb_fwd     starts at max(bottom_fwd end, input_dist end)
  output_dist (pooled all-to-all + row-wise reduce-scatter) at max_d emb_fwd end;
  top_fwd     chunked into c pieces: span max(comm + comp / c, comm / c + comp)
  top_bwd     then grad_dist (reverse of output_dist), chunk-pipelined the same way
  bottom_bwd  overlaps grad_dist;  emb_bwd at max(bottom_bwd end, grad_dist end)
  dense_sync  gradient buckets (n of them) ready along the backward pass:
              end = max(s + T_bwd / n + A + G, e + A / n, grad_dist end + A / n)
  optimizer   after emb_bwd and dense_sync
  overhead    after the optimizer, on the compute stream: the launches no other term prices, the
              cross-stream hand-offs of the collectives and the host's fixed work per step
              (cost/overhead.py: the costs that do not shrink with a faster chip)
  step        = max(critical path, total communication busy, total compute busy)

Interference (cost/contention.py): a compute phase next to a collective loses the compute units a
core-driven collective holds (a second wave for kernels sized to the whole grid) and the share of
HBM bandwidth the collective's traffic takes beyond what the phase leaves free; offload engines
hold no units and move each byte once.

Maxima and minima are exact at temperature 0 and smooth above it (cost/smooth.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..hardware import System, whole_system
from ..plan import PlanArrays
from ..workload import RankingModel
from . import contention
from .arrays import lead, xp_of
from .collectives import Net
from .compute import gemm_parts, hbm_time, roofline
from .memory import dense_shards
from .overhead import step_overheads
from .smooth import reduce_max, smax, smin
from .traffic import CommTimes, Traffic

STAGES = ("bf", "bb", "tf", "tb")      # the dense stages: bottom / top, forward / backward


class Stages(NamedTuple):
    """The dense stages' GEMM roofline parts (compute.gemm_parts, masked to the stage) and their
    times alone (no interference), keyed by STAGES."""

    parts: dict
    alone: dict


def dense_stages(chip, model: RankingModel, local_batch) -> Stages:
    """The dense part split into its bottom and top stages, forward and backward."""
    fwd_parts, bwd_parts = gemm_parts(chip, model, local_batch)
    G = len(model.dense.layer) or int(np.shape(model.dense.m)[0])
    bottom = np.asarray(model.dense.bottom, bool) if model.dense.bottom else np.zeros(G, bool)
    parts = {"bf": _stage(fwd_parts, bottom), "bb": _stage(bwd_parts, bottom),
             "tf": _stage(fwd_parts, ~bottom), "tb": _stage(bwd_parts, ~bottom)}
    return Stages(parts, {k: roofline(p).sum() for k, p in parts.items()})


def _stage(parts, mask):
    """The roofline parts of the GEMMs `mask` marks: a slice where they are consecutive (the other
    GEMMs would add exact zeros to every sum over the stage), else the parts times the 0/1 mask."""
    at = np.flatnonzero(mask)
    if len(at) == 0 or at[-1] - at[0] + 1 == len(at):
        lo, hi = (int(at[0]), int(at[-1]) + 1) if len(at) else (0, 0)
        return tuple(x[..., lo:hi] for x in parts)
    return tuple(x * mask.astype(np.float32) for x in parts)


def optimizer_time(chip, model: RankingModel, shard):
    """The dense optimizer's pass over its 1 / shard of the dense state (HBM-bound) and its launch."""
    P_dense = model.dense.params()
    return hbm_time(chip, P_dense * (2.0 * model.param_bytes + model.param_bytes
                                     + 2.0 * 4.0 * model.dense_opt_values) / shard) + chip.launch_s


class Interference(NamedTuple):
    """Seconds each compute phase gains from the collective beside it (cost/contention.py)."""

    bottom_fwd: object   # next to the input distribution's share in the step
    backward: object     # the dense backward next to the next batch's pipelined input distribution
    top_fwd: object      # next to the output distribution's chunked share
    top_bwd: object      # next to the gradient distribution's chunked share
    bottom_bwd: object   # next to the gradient distribution and the dense sync
    emb_fwd: object      # [D] the lookups next to a fully sharded dense part's parameter all-gather
    slowdown: dict       # overlap -> how much slower its dense compute runs next to the collective


def interference(chip, net: Net, pa: PlanArrays, stages: Stages, emb_fwd, comm: CommTimes, tr: Traffic,
                 mn) -> Interference:
    """How much each overlap of a collective with compute slows the compute (module docstring)."""
    xp = xp_of(pa.shard_type)
    held = (1.0 - net.offload) * chip.core_compute_fraction        # units a core-driven collective holds
    mult = net.offload * chip.dma_hbm_mult + (1.0 - net.offload) * chip.core_hbm_mult
    du = contention.unit_excess(chip, held)

    def rate(comm_s, traffic):      # HBM bytes/s the collective streams while it runs
        return mult * traffic / xp.maximum(comm_s, 1e-12)

    slowdown = {}

    def on_dense(name, keys, share, comm_s, traffic):
        """Time a collective of `comm_s` s moving `traffic` bytes (sent + received) adds to the dense
        stages `keys` it overlaps (their `share`: a chunked overlap covers part of them)."""
        db = contention.hbm_excess(chip, rate(comm_s, traffic))
        plain = sum(stages.alone[k] for k in keys)
        excess = sum(contention.gemm_excess(stages.parts[k], du, db) for k in keys)
        slowdown[name] = 1.0 + contention.ratio(excess, plain)
        return contention.added(plain * share, excess * share, comm_s, mn)

    def on_memory(plain, comm_s, traffic):
        """The same for a memory-bound phase (embedding lookups): slowed by the HBM share alone."""
        db = contention.hbm_excess(chip, rate(comm_s, traffic))
        return contention.added(plain, plain * lead(db, plain), lead(comm_s, plain), mn)

    p, chunks = pa.pipeline, pa.overlap_chunks
    m_fsdp = pa.dense_mode[..., 1]
    hbm = tr.hbm
    frac_c = 1.0 - 1.0 / chunks
    x_bf = on_dense("bottom_fwd", ("bf",), 1.0, (1.0 - p) * comm.input, (1.0 - p) * hbm["input_dist"])
    x_prev = on_dense("backward", ("tb", "bb"), 1.0, p * comm.input, p * hbm["input_dist"])
    x_tf = on_dense("top_fwd", ("tf",), frac_c, comm.output * frac_c, hbm["output_dist"] * frac_c)
    x_tb = on_dense("top_bwd", ("tb",), frac_c, comm.grad * frac_c, hbm["output_dist"] * frac_c)
    x_bb = on_dense("bottom_bwd", ("bb",), 1.0, comm.grad + comm.sync, hbm["output_dist"] + hbm["dense_sync"])
    x_ef = on_memory(emb_fwd, m_fsdp * comm.gather / 2.0, m_fsdp * hbm["param_gather"] / 2.0)
    return Interference(x_bf, x_prev, x_tf, x_tb, x_bb, x_ef, slowdown)


def exposed_calls(pa: PlanArrays, tr: Traffic):
    """Collective calls whose stream hand-offs are exposed (cost/overhead.py): the pipelined share of
    the input all-to-all hands off during the previous step; the output collectives forward and
    backward; the dense gradients' sync as one call (in at the first bucket, out at the last: the
    buckets between hand off while the backward runs); a sharded dense part's parameter
    all-gathers, forward and backward."""
    u = tr.used
    m_fsdp, m_hyb = pa.dense_mode[..., 1], pa.dense_mode[..., 2]
    return (1.0 - pa.pipeline) * u.input + 2.0 * (u.a2a + u.rw + u.tr) + u.dp + 1.0 + 2.0 * (m_fsdp + m_hyb)


class Schedule(NamedTuple):
    """One plan's step on its streams. Per phase (evaluate.PHASES) arrays [D]."""

    step: object         # the step time
    phase: dict          # phase -> busy time, no interference
    start: dict          # phase -> start time in the step's timeline
    end: dict            # phase -> end time
    compute: object      # [D] compute busy, interference included
    compute_plain: object   # [D] compute busy alone
    interference: object    # [D] compute time added by overlapping collectives
    comm_busy: object    # communication stream busy time
    slowdown: dict       # overlap -> how much slower its dense compute runs next to the collective


def step_schedule(system: System, model: RankingModel, pa: PlanArrays, tr: Traffic, comm: CommTimes, net: Net,
                  tau: float) -> Schedule:
    """The step's timeline on the compute and communication streams (module docstring); tau the
    temperature of its maxima and minima."""
    chip = system.chip
    xp = xp_of(pa.shard_type)
    D = system.num_chips
    mx = lambda a, c: smax(a, c, tau)
    mn = lambda a, c: smin(a, c, tau)
    dmax = lambda x: reduce_max(x, -1, tau)

    stages = dense_stages(chip, model, model.global_batch / D)
    t_bf, t_bb, t_tf, t_tb = (stages.alone[k] for k in STAGES)
    e_f, e_b = tr.emb.fwd_s, tr.emb.bwd_s
    dense = whole_system(system)          # a 2D plan's dense state is sharded over every group's chips
    t_opt = optimizer_time(chip, model, dense_shards(pa, dense.num_chips, dense.domain_size))
    x = interference(chip, net, pa, stages, e_f, comm, tr, mn)
    x_bf, x_prev, x_tf, x_tb, x_bb, x_ef = x[:6]
    c_in, c_out, c_gout, c_sync, c_ag = comm.input, comm.output, comm.grad, comm.sync, comm.gather
    buckets, chunks, p = pa.grad_buckets, pa.overlap_chunks, pa.pipeline

    zero = xp.zeros(np.shape(pa.offload) + (D,), np.float32)
    dv = lambda v: lead(v, zero)          # a per-plan value against per-device ones (numpy: [N] -> [N, 1])
    in_end = (1.0 - p) * c_in
    bf_end = zero + t_bf + dv(x_bf)
    ag_end = in_end + c_ag / 2.0
    ef_start = mx(bf_end, dv(in_end))
    ef_end = ef_start + e_f + x_ef
    out_start = dmax(ef_end)
    c_out_eff = c_out + comm.chunks
    tf_span = mx(c_out_eff + (t_tf + x_tf) / chunks, c_out_eff / chunks + t_tf + x_tf)
    tf_end = dv(mx(out_start + tf_span, ag_end + t_tf + x_tf)) + zero
    tf_start = tf_end - t_tf - dv(x_tf)
    tb_end = tf_end + t_tb + dv(x_tb) + dv(x_prev)
    g_start = dmax(tf_end)
    c_gout_eff = c_gout + comm.chunks
    g_end = g_start + mx((t_tb + x_tb) + c_gout_eff / chunks, (t_tb + x_tb) / chunks + c_gout_eff)
    bb_end = tb_end + t_bb + dv(x_bb)
    eb_start = mx(bb_end, dv(g_end))
    eb_end = eb_start + e_b
    T_bwd = t_tb + t_bb
    sync_end = dmax(mx(mx(tf_end + dv(T_bwd / buckets) + dv(c_sync) + dv(c_gout_eff), bb_end + dv(c_sync / buckets)),
                       dv(g_end + c_sync / buckets)))
    opt_start = mx(eb_end, dv(sync_end))
    opt_end = opt_start + dv(t_opt)
    t_ovh = step_overheads(system, model, pa, exposed_calls(pa, tr)).total_s
    ovh_end = opt_end + dv(t_ovh)

    extra = dv(x_bf + x_prev + x_tf + x_tb + x_bb) + x_ef
    compute_plain = t_bf + e_f + t_tf + t_tb + t_bb + e_b + dv(t_opt) + dv(t_ovh)
    compute = compute_plain + extra
    comm_busy = c_in + c_out_eff + c_gout_eff + c_sync          # c_sync holds the parameter all-gathers
    step = mx(mx(dmax(ovh_end), comm_busy), dmax(compute))

    phase = {"input_dist": zero + dv(c_in), "bottom_fwd": zero + t_bf, "emb_fwd": e_f, "output_dist": zero + dv(c_out),
             "top_fwd": zero + t_tf, "top_bwd": zero + t_tb, "grad_dist": zero + dv(c_gout),
             "bottom_bwd": zero + t_bb, "emb_bwd": e_b, "dense_sync": zero + dv(c_sync), "optimizer": zero + dv(t_opt),
             "overhead": zero + dv(t_ovh)}
    start = {"input_dist": zero, "bottom_fwd": zero, "emb_fwd": ef_start, "output_dist": zero + dv(out_start),
             "top_fwd": tf_start, "top_bwd": tf_end, "grad_dist": zero + dv(g_start), "bottom_bwd": tb_end,
             "emb_bwd": eb_start, "dense_sync": tf_end, "optimizer": opt_start, "overhead": opt_end}
    end = {"input_dist": zero + dv(in_end), "bottom_fwd": bf_end, "emb_fwd": ef_end,
           "output_dist": zero + dv(out_start) + dv(c_out_eff), "top_fwd": tf_end, "top_bwd": tb_end,
           "grad_dist": zero + dv(g_end), "bottom_bwd": bb_end, "emb_bwd": eb_end, "dense_sync": zero + dv(sync_end),
           "optimizer": opt_end, "overhead": ovh_end}
    return Schedule(step, phase, start, end, compute, compute_plain, extra, comm_busy, x.slowdown)
