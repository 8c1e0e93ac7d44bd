"""evaluate(system, model, plan) -> Breakdown: one training step as a schedule of tasks.

The step (DESIGN.md, "Schedule"), per device d, with collectives starting when every participant
is ready (max over devices) and compute and communication on separate streams:

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import jax
import numpy as np

from .cache import jit, traced
from .cost import collectives as coll
from .cost.arrays import lead, xp_of
from .cost import contention
from .cost.compute import dense_flops, gemm_parts, hbm_time, peak_flops, roofline
from .cost.embedding import EmbeddingCosts, embedding_costs, hierarchical, row_wise_subset
from .cost.overhead import step_overheads
from .cost.memory import activation_bytes, dense_state_bytes
from .cost.smooth import hard_max, reduce_max, smax, smin
from .config import ConfigError
from .hardware import System, _pytree, capacity_bytes, domain_chips, load_system, static
from .plan import (COLLECTIVES, DP, PRECISION_BYTES, RW, TW, CW, TWRW, Plan, PlanArrays, check_arrays, load_plan,
                   to_arrays, validate_plan)
from .workload import RankingModel, load_model

PHASES = ("input_dist", "bottom_fwd", "emb_fwd", "output_dist", "top_fwd", "top_bwd", "grad_dist",
          "bottom_bwd", "emb_bwd", "dense_sync", "optimizer", "overhead")
COMM_PHASES = ("input_dist", "output_dist", "grad_dist", "dense_sync")
A2A, AR, RS, AG = (COLLECTIVES.index(k) for k in ("all_to_all", "all_reduce", "reduce_scatter", "all_gather"))


@_pytree
@dataclass(frozen=True)
class Breakdown:
    """Everything one evaluation says about a step. Arrays of shape [D] are per device."""

    step_s: jax.Array
    samples_per_s: jax.Array
    phase_s: dict                 # phase -> [D] busy time of that phase (no interference)
    start_s: dict                 # phase -> [D] start time in the step's timeline
    end_s: dict                   # phase -> [D] end time
    compute_s: jax.Array          # [D] compute busy time, interference included
    comm_s: jax.Array             # communication stream busy time
    exposed_comm_s: jax.Array     # step time not covered by the slowest device's compute
    interference_s: jax.Array     # [D] compute time added by overlapping collectives
    slowdown: jax.Array           # [D] compute busy with / without interference
    mfu: jax.Array                # dense model FLOPs / (step x chips x peak)
    memory_bytes: jax.Array       # [D] HBM used
    memory_parts: dict            # part -> [D] bytes
    capacity_bytes: jax.Array
    host_memory_bytes: jax.Array  # [D] host DRAM used by offloaded tables
    feasible: jax.Array           # bool: fits HBM and host DRAM on every device
    usd_per_million_samples: jax.Array
    joules_per_sample: jax.Array
    comm_bytes: dict              # collective -> bytes per device (max over devices)
    contention: dict              # overlap -> how much slower its dense compute runs next to the collective
    num_chips: int = static(default=1)


def _loaded(value, cls, load, field: str, allowed: str):
    """`value` if it is a `cls`; load(value) if it is a name or path; else a ConfigError naming `field`."""
    if isinstance(value, (str, Path)):
        return load(value)
    if not isinstance(value, cls):
        raise ConfigError("", field, f"must be {allowed}; got {type(value).__name__}")
    return value


def as_system(system: System | str | Path) -> System:
    """A System, or one loaded from a preset name or TOML path; anything else is a ConfigError."""
    return _loaded(system, System, load_system, "system", "a System, a preset name (e.g. 'mtia300-64') or a TOML path")


def as_model(model: RankingModel | str | Path) -> RankingModel:
    """A RankingModel, or one loaded from a preset name or TOML/JSON path; anything else is a ConfigError."""
    return _loaded(model, RankingModel, load_model, "model",
                   "a RankingModel, a preset name (e.g. 'dlrm-dcnv2-mlperf') or a TOML/JSON path")


def resolve(system: System | str | Path, model: RankingModel | str | Path,
            plan: Plan | PlanArrays | str | Path | None = None):
    """(system, model, plan) as objects: each one given as an object, or as a preset name or file
    path that is loaded (the plan: a plan JSON). Anything else is a ConfigError naming the argument."""
    system, model = as_system(system), as_model(model)
    if isinstance(plan, (str, Path)):
        plan = load_plan(plan, system, model)
    elif plan is not None and not isinstance(plan, (Plan, PlanArrays)):
        raise ConfigError("", "plan", f"must be a Plan, PlanArrays or a plan JSON path; got {type(plan).__name__}")
    return system, model, plan


def evaluate(system: System | str, model: RankingModel | str, plan: Plan | PlanArrays | str, *,
             temperature: float = 0.0) -> Breakdown:
    """Step time, breakdown, memory and cost of `plan` on `system` for `model`.

    `plan` may be a discrete Plan (checked, then turned one-hot) or PlanArrays (one-hot or relaxed),
    or a plan JSON's path; `system` and `model` objects, or preset names or file paths.
    temperature = 0 uses exact max/min; > 0 smooth ones (for gradient search over relaxed plans).
    Pure jnp: jit, vmap and grad go through it (with PlanArrays).
    """
    if not (isinstance(system, System) and isinstance(model, RankingModel) and isinstance(plan, (Plan, PlanArrays))):
        system, model, plan = resolve(system, model, plan)
        if plan is None:
            raise ConfigError("", "plan", "is required (a Plan, PlanArrays or a plan JSON path)")
    if isinstance(plan, Plan):
        validate_plan(plan, system, model)
        plan = to_arrays(plan, system, model)
    tau = check_temperature(temperature)
    if traced((system, model, plan)):
        return _evaluate_nested(system, model, plan, tau)
    check_arrays(plan, system, model)
    return _evaluate_jit(system, model, plan, tau)


MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-6, 1e3


def check_temperature(temperature) -> float:
    """`temperature` as a float: 0 (exact max and min), or a relative temperature in
    [MIN_TEMPERATURE, MAX_TEMPERATURE] (below it the smooth max's scale, temperature x the mean
    argument, can underflow float32 to 0 and the step be NaN; a negative one makes the max a min)."""
    ok = isinstance(temperature, (int, float, np.integer, np.floating)) and not isinstance(temperature, bool)
    t = float(temperature) if ok else math.nan
    if not (t == 0.0 or MIN_TEMPERATURE <= t <= MAX_TEMPERATURE):
        raise ConfigError("", "temperature", f"must be 0 (exact) or a number from {MIN_TEMPERATURE:g} to "
                          f"{MAX_TEMPERATURE:g} (smooth max and min), got {temperature!r}")
    return t


def _evaluate(system: System, model: RankingModel, pa: PlanArrays, tau: float) -> Breakdown:
    return _step_model(system, model, pa, tau)[0]


# compiled once per problem shape (System, model and plan structures), reused by every call; with
# perfmodel's quick compile options (cache.jit): one plan's evaluation runs in about a millisecond, its
# compile takes 0.56-0.63 s instead of 1.06-1.25 s (MLPerf@h100-16: 0.33 ms a call either way;
# prod-856@mtia300-256: 1.35 vs 0.52 ms). jax allows compile options only on a top-level jit:
# evaluate() called under a transformation (inside a jit, vmap or grad: its inputs are tracers), as
# sweeps do, uses a plain one
_evaluate_jit = jit(_evaluate, static_argnums=3, quick=True)
_evaluate_nested = jax.jit(_evaluate, static_argnums=3)


def _step_model(system: System, model: RankingModel, pa: PlanArrays, tau: float) -> tuple[Breakdown, EmbeddingCosts]:
    """The step's Breakdown, and the embedding costs it was built from (the plan search reads the
    per-device all-to-all volumes from them). Traced for one plan (vmap over plans); in numpy, of a
    batch of discrete plans (PlanArrays with a leading batch axis, as every output then has:
    cost.arrays; tau must be 0)."""
    chip = system.chip
    xp = xp_of(pa.shard_type)
    D, L = system.num_chips, system.domain_size
    K = len(system.levels)
    B = model.global_batch
    b = B / D
    mx = lambda a, c: smax(a, c, tau)
    mn = lambda a, c: smin(a, c, tau)
    dmax = lambda x: reduce_max(x, -1, tau)

    prec = np.asarray(PRECISION_BYTES, np.float32)
    a2a_b = xp.sum(pa.a2a_precision * prec, axis=-1)
    grad_b = xp.sum(pa.grad_precision * prec, axis=-1)
    net = coll.make_net(system, pa.offload)
    algo = pa.algorithm

    # ---------------------------------------------------------------- compute
    fwd_parts, bwd_parts = gemm_parts(chip, model, b)
    G = len(model.dense.layer) or int(np.shape(model.dense.m)[0])
    bottom = np.asarray(model.dense.bottom, np.float32) if model.dense.bottom else np.zeros(G, np.float32)
    stage = {"bf": tuple(x * bottom for x in fwd_parts), "bb": tuple(x * bottom for x in bwd_parts),
             "tf": tuple(x * (1 - bottom) for x in fwd_parts), "tb": tuple(x * (1 - bottom) for x in bwd_parts)}
    alone = {k: roofline(parts).sum() for k, parts in stage.items()}      # each stage's time, uncontended
    t_bf, t_bb, t_tf, t_tb = (alone[k] for k in ("bf", "bb", "tf", "tb"))
    emb = embedding_costs(system, model, pa, a2a_b, grad_b)
    e_f, e_b = emb.fwd_s, emb.bwd_s

    # ---------------------------------------------------------------- communication
    # A collective runs only if some table needs it. Its expected time is P(used) x time(bytes |
    # used), with P(used) = 1 - prod_t (1 - s_t): exactly 0 or 1 for a discrete plan, smooth for a
    # relaxed one (latency terms fade in with the probability instead of jumping).
    S = pa.shard_type
    def used(s_t):
        return 1.0 - xp.prod(1.0 - s_t, axis=-1)
    def expected(u, timed, *volumes):
        safe = xp.maximum(u, 1e-6)
        return u * timed(*(v / lead(safe, v) for v in volumes))
    top = K - 1
    u_in = used(1.0 - S[..., DP])
    sub = row_wise_subset(pa, D)      # row-wise over a subset: its partial sums go in the all-to-all
    sub = 0.0 if sub is None else sub
    u_a2a = used(S[..., TW] + S[..., CW] + S[..., TWRW] + S[..., RW] * model.tables.sequence + sub)
    u_rw = used(S[..., RW] * (1.0 - model.tables.sequence) - sub)
    hier = hierarchical(pa, D)        # ... and, reduced inside domains first, a domain reduce-scatter
    u_tr = used(S[..., TWRW] * (1.0 - model.tables.sequence) + (0.0 if hier is None else hier))
    u_dp = used(S[..., DP])
    a2a, rs, ag, ar = (algo[..., i, :] for i in (A2A, RS, AG, AR))
    c_in = expected(u_in, lambda a, c: coll.all_to_all(net, a, c, a2a, dmax), emb.in_send, emb.in_recv)
    c_rw = expected(u_rw, lambda x: coll.reduce_scatter(net, x, 0, top, rs), emb.rw_bytes)
    c_rw_b = expected(u_rw, lambda x: coll.all_gather(net, x, 0, top, ag), emb.rw_bytes)
    # table-row-wise (pooled): the reduce-scatter inside each domain (its slowest device's buffer)
    # before the all-to-all, and in the backward the all-gather after it
    tr_max = dmax(emb.tr_bytes)
    c_tr = expected(u_tr, lambda x: coll.reduce_scatter(net, x, 0, 0, rs), tr_max)
    c_tr_b = expected(u_tr, lambda x: coll.all_gather(net, x, 0, 0, ag), tr_max)
    a2a_out = expected(u_a2a, lambda a, c: coll.all_to_all(net, a, c, a2a, dmax), emb.out_send, emb.out_recv)
    c_out = a2a_out + c_rw + c_tr
    c_gout = a2a_out + c_rw_b + c_tr_b

    P_dense = model.dense.params()
    g_bytes = P_dense * grad_b
    p_bytes = P_dense * model.param_bytes
    m_rep, m_fsdp, m_hyb = pa.dense_mode[..., 0], pa.dense_mode[..., 1], pa.dense_mode[..., 2]
    ddp = coll.all_reduce(net, g_bytes, 0, top, ar)
    fsdp_rs = coll.reduce_scatter(net, g_bytes, 0, top, rs)
    fsdp_ag = coll.all_gather(net, p_bytes, 0, top, ag)
    hyb_rs = coll.reduce_scatter(net, g_bytes, 0, 0, rs)
    hyb_ar = coll.all_reduce(net, g_bytes / L, 1, top, ar) if K > 1 else 0.0
    hyb_ag = coll.all_gather(net, p_bytes, 0, 0, ag)
    c_sync_dense = m_rep * ddp + m_fsdp * fsdp_rs + m_hyb * (hyb_rs + hyb_ar)
    c_ag = m_fsdp * fsdp_ag + m_hyb * hyb_ag                 # parameter all-gather, forward and backward
    c_dp = expected(u_dp, lambda x: coll.all_reduce(net, x, 0, top, ar), emb.dp_grad_bytes)
    buckets, chunks, p = pa.grad_buckets, pa.overlap_chunks, pa.pipeline
    alpha_max = net.alpha[0]
    for a in net.alpha[1:]:
        alpha_max = xp.maximum(alpha_max, a)
    chunk_comm = (chunks - 1.0) * (net.setup_s + alpha_max) * (D > 1)
    c_sync = c_sync_dense + c_dp + (buckets - 1.0) * (net.setup_s + alpha_max) * (D > 1) + c_ag

    shard = m_rep * 1.0 + m_fsdp * D + m_hyb * L
    t_opt = hbm_time(chip, P_dense * (2.0 * model.param_bytes + model.param_bytes
                                      + 2.0 * 4.0 * model.dense_opt_values) / shard) + chip.launch_s

    # ---------------------------------------------------------------- interference (cost/contention.py)
    held = (1.0 - net.offload) * chip.core_compute_fraction        # units a core-driven collective holds
    mult = net.offload * chip.dma_hbm_mult + (1.0 - net.offload) * chip.core_hbm_mult
    du = contention.unit_excess(chip, held)

    def rate(comm, traffic):        # HBM bytes/s the collective streams while it runs
        return mult * traffic / xp.maximum(comm, 1e-12)

    slowdown = {}

    def on_dense(name, keys, share, comm, traffic):
        """Time a collective of `comm` s moving `traffic` bytes (sent + received) adds to the dense
        stages `keys` it overlaps (their `share`: a chunked overlap covers part of them)."""
        db = contention.hbm_excess(chip, rate(comm, traffic))
        plain = sum(alone[k] for k in keys)
        excess = sum(contention.gemm_excess(stage[k], du, db) for k in keys)
        slowdown[name] = 1.0 + contention.ratio(excess, plain)
        return contention.added(plain * share, excess * share, comm, mn)

    def on_memory(plain, comm, traffic):
        """The same for a memory-bound phase (embedding lookups): slowed by the HBM share alone."""
        db = contention.hbm_excess(chip, rate(comm, traffic))
        return contention.added(plain, plain * lead(db, plain), lead(comm, plain), mn)

    Ld = domain_chips(system)                              # each device's domain: L, or [D] on a partial system
    tr_moved = emb.tr_bytes * (Ld - 1) / Ld                # [D] sent (and received) by the domain reduce-scatter
    out_bytes = (hard_max(xp.sum(xp.maximum(emb.out_send, emb.out_recv), axis=-1) + tr_moved, -1)
                 + emb.rw_bytes * (D - 1) / D)
    in_bytes = hard_max(xp.sum(xp.maximum(emb.in_send, emb.in_recv), axis=-1), -1)
    sync_bytes = 2.0 * (g_bytes + emb.dp_grad_bytes) * (D - 1) / D
    # bytes each chip sends and receives (its HBM traffic's measure): the busiest device's
    out_traffic = (hard_max(xp.sum(emb.out_send + emb.out_recv, axis=-1) + 2.0 * tr_moved, -1)
                   + 2.0 * emb.rw_bytes * (D - 1) / D)
    in_traffic = hard_max(xp.sum(emb.in_send + emb.in_recv, axis=-1), -1)
    sync_traffic = 2.0 * sync_bytes
    ag_traffic = 2.0 * p_bytes * (D - 1) / D
    frac_c = 1.0 - 1.0 / chunks
    x_bf = on_dense("bottom_fwd", ("bf",), 1.0, (1.0 - p) * c_in, (1.0 - p) * in_traffic)
    x_prev = on_dense("backward", ("tb", "bb"), 1.0, p * c_in, p * in_traffic)   # pipelined input dist of the next batch
    x_tf = on_dense("top_fwd", ("tf",), frac_c, c_out * frac_c, out_traffic * frac_c)
    x_tb = on_dense("top_bwd", ("tb",), frac_c, c_gout * frac_c, out_traffic * frac_c)
    x_bb = on_dense("bottom_bwd", ("bb",), 1.0, c_gout + c_sync, out_traffic + sync_traffic)
    x_ef = on_memory(e_f, m_fsdp * c_ag / 2.0, m_fsdp * ag_traffic / 2.0)

    # ---------------------------------------------------------------- schedule
    zero = xp.zeros(np.shape(pa.offload) + (D,), np.float32)
    dv = lambda x: lead(x, zero)          # a per-plan value against per-device ones (numpy: [N] -> [N, 1])
    in_end = (1.0 - p) * c_in
    bf_end = zero + t_bf + dv(x_bf)
    ag_end = in_end + c_ag / 2.0
    ef_start = mx(bf_end, dv(in_end))
    ef_end = ef_start + e_f + x_ef
    out_start = dmax(ef_end)
    c_out_eff = c_out + chunk_comm
    tf_span = mx(c_out_eff + (t_tf + x_tf) / chunks, c_out_eff / chunks + t_tf + x_tf)
    tf_end = dv(mx(out_start + tf_span, ag_end + t_tf + x_tf)) + zero
    tf_start = tf_end - t_tf - dv(x_tf)
    tb_end = tf_end + t_tb + dv(x_tb) + dv(x_prev)
    g_start = dmax(tf_end)
    c_gout_eff = c_gout + chunk_comm
    g_end = g_start + mx((t_tb + x_tb) + c_gout_eff / chunks, (t_tb + x_tb) / chunks + c_gout_eff)
    bb_end = tb_end + t_bb + dv(x_bb)
    eb_start = mx(bb_end, dv(g_end))
    eb_end = eb_start + e_b
    T_bwd = t_tb + t_bb
    sync_end = dmax(mx(mx(tf_end + dv(T_bwd / buckets) + dv(c_sync) + dv(c_gout_eff), bb_end + dv(c_sync / buckets)),
                       dv(g_end + c_sync / buckets)))
    opt_start = mx(eb_end, dv(sync_end))
    opt_end = opt_start + dv(t_opt)
    # collective calls whose stream hand-offs are exposed (cost/overhead.py): the pipelined share of
    # the input all-to-all hands off during the previous step; the output collectives forward and
    # backward; the dense gradients' sync as one call (in at the first bucket, out at the last: the
    # buckets between hand off while the backward runs); a sharded dense part's parameter
    # all-gathers, forward and backward
    calls = ((1.0 - p) * u_in + 2.0 * (u_a2a + u_rw + u_tr) + u_dp + 1.0 + 2.0 * (m_fsdp + m_hyb))
    ovh = step_overheads(system, model, pa, calls)
    t_ovh = ovh.total_s
    ovh_end = opt_end + dv(t_ovh)

    extra = dv(x_bf + x_prev + x_tf + x_tb + x_bb) + x_ef
    compute_plain = t_bf + e_f + t_tf + t_tb + t_bb + e_b + dv(t_opt) + dv(t_ovh)
    compute = compute_plain + extra
    comm_busy = c_in + c_out_eff + c_gout_eff + c_sync          # c_sync holds the parameter all-gathers
    step = mx(mx(dmax(ovh_end), comm_busy), dmax(compute))

    # ---------------------------------------------------------------- memory
    dense_mem = dv(dense_state_bytes(model, shard)) + zero
    act = activation_bytes(model, b, emb.pooled_bytes) + zero
    buffers = (xp.sum(emb.out_send + emb.out_recv, axis=-1) + 2.0 * tr_moved + xp.sum(emb.in_send + emb.in_recv, axis=-1)
               + dv((B * emb.rw_bytes / B) * 2.0) + dv(g_bytes / buckets))
    parts = {"embeddings": emb.hbm_bytes, "dense": dense_mem, "activations": act, "buffers": buffers}
    mem = emb.hbm_bytes + dense_mem + act + buffers
    cap = capacity_bytes(system)
    feasible = xp.all(mem <= cap, axis=-1) & xp.all(emb.host_bytes <= chip.host_dram_bytes, axis=-1)

    # ---------------------------------------------------------------- figures
    peak = peak_flops(chip, model.dense_dtype)
    mfu = dense_flops(model) * B / (step * D * peak)
    hosts = system.num_hosts if D % system.chips_per_host else D / system.chips_per_host   # a partial host costs a whole one
    usd = (D * chip.usd_per_hour + hosts * system.host_usd_per_hour) * step / 3600.0 / B * 1e6
    joules = hosts * system.host_power_W * step / B      # host power includes its accelerators (Table III)

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
    comm_bytes = {"input_dist": in_bytes, "output_dist": out_bytes, "grad_dist": out_bytes, "dense_sync": sync_bytes}
    bd = Breakdown(
        step_s=step, samples_per_s=B / step, phase_s=phase, start_s=start, end_s=end, compute_s=compute,
        comm_s=comm_busy, exposed_comm_s=xp.maximum(step - dmax(compute), 0.0), interference_s=extra,
        slowdown=compute / compute_plain, mfu=mfu, memory_bytes=mem, memory_parts=parts, capacity_bytes=cap,
        host_memory_bytes=emb.host_bytes, feasible=feasible, usd_per_million_samples=usd,
        joules_per_sample=joules, comm_bytes=comm_bytes, contention=slowdown, num_chips=D,
    )
    return bd, emb
