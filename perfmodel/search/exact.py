"""The exact baseline: a MILP (HiGHS) for the table-placement subproblem of small instances.

Subproblem: every table is table_wise; the settings are fixed (dense parallelism, algorithms,
precisions, buckets and offload of the start plan, with pipelining on, one overlap chunk and the
direct all-to-all); choose each table's device to minimize the model's hard step time under the
per-device memory caps.

The MILP is built from the model itself, not a second copy of its formulas: every per-device
quantity the placement moves (lookup times, all-to-all bytes per level, memory) is linear in the
placement matrix, so its coefficients are the model's Jacobian; the placement-free times are read
off a hard evaluation of the start plan. The schedule of `evaluate` under these settings is a
max-plus expression plus min() terms (interference): maxima become epigraph variables, each
min(a, b) a binary choice with big-M. How much slower the dense backward runs next to a collective
(cost/contention.py: the collective's HBM traffic rate over its time) is held at a plan's value,
and the MILP solved again at its solution's until the placement repeats (a fixed point: its
optimum is then the hard step of its plan); the lookups' slowdown next to a fully sharded dense
part's parameter all-gather is fixed by the settings alone. `exact_plan` checks the MILP's optimum against the
hard evaluation of its solution and reports both.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ..cache import jit
from ..config import ConfigError
from ..cost import collectives as coll
from ..cost.embedding import embedding_costs
from ..evaluate import evaluate_arrays, evaluate
from ..hardware import System
from ..plan import COLLECTIVES, PRECISION_BYTES, Plan, TablePlan, to_arrays
from ..workload import RankingModel

MAX_TABLES, MAX_DEVICES = 16, 8
COLLECTIVE_AG = COLLECTIVES.index("all_gather")
US, MB = 1e6, 1e-6          # the MILP works in microseconds and megabytes (conditioning)


def subproblem_plan(base: Plan, model: RankingModel, ranks: list[int] | None = None) -> Plan:
    """The subproblem's fixed settings around a placement (all table_wise)."""
    names = model.tables.names
    ranks = ranks or [0] * len(names)
    return dataclasses.replace(
        base, tables={n: TablePlan("table_wise", [int(r)]) for n, r in zip(names, ranks)},
        pipeline=True, overlap_chunks=1, algorithms=dict(base.algorithms, all_to_all="direct"))


def _quantities(P, system, model, pa0, a2a_b, grad_b):
    pa = dataclasses.replace(pa0, placement=P)
    emb = embedding_costs(system, model, pa, a2a_b, grad_b)
    bd = evaluate_arrays(system, model, pa, 0.0)
    return {"ef": emb.fwd_s * US, "eb": emb.bwd_s * US, "os": emb.out_send * MB, "or": emb.out_recv * MB,
            "is": emb.in_send * MB, "ir": emb.in_recv * MB, "mem": bd.memory_bytes * MB}


@jit
def _linear_parts(system, model, pa0, a2a_b, grad_b):
    """Value at P = 0 and Jacobian w.r.t. P of every placement-linear quantity (exact: linear)."""
    P0 = jnp.zeros_like(pa0.placement)
    args = (system, model, pa0, a2a_b, grad_b)
    return _quantities(P0, *args), jax.jacobian(_quantities)(P0, *args)


def admits(system: System, model: RankingModel, limits, constraints=None) -> None:
    """Refuse constraints the subproblem cannot keep: a table that may not be table_wise, or not in
    HBM (cache ratio 1). Pinned ranks it keeps (plan.Limits.devices)."""
    from ..plan import TW
    for t, name in enumerate(model.tables.names):
        if limits.types[t, TW] <= 0 or limits.fused[t] <= 0:
            key = "sharding_types" if limits.types[t, TW] <= 0 else "compute_kernels"
            raise ConfigError("constraints", f"{name}.{key}", "rules out table_wise in HBM, the only placement the "
                              "exact method solves for (every table table_wise, kernel fused): use gradient")


def exact_plan(system: System, model: RankingModel, start: Plan, time_limit_s: float = 120.0,
               devices: np.ndarray | None = None) -> tuple[Plan, dict]:
    """The MILP's placement (module docstring); devices [T, D]: 1 where table t may go (constraints)."""
    T, D = model.tables.count, system.num_chips
    if T > MAX_TABLES or D > MAX_DEVICES:
        raise ConfigError("", "method", f"exact takes at most {MAX_TABLES} tables and {MAX_DEVICES} devices "
                          f"(this instance: {T} tables, {D} devices); use gradient")
    allowed = np.ones((T, D)) if devices is None else np.asarray(devices)
    base = subproblem_plan(start, model, [int(np.argmax(allowed[t])) for t in range(T)])
    pa0 = to_arrays(base, system, model)
    bd0 = evaluate(system, model, base)
    ph = {k: float(np.max(v)) for k, v in bd0.phase_s.items()}
    prec = np.asarray(PRECISION_BYTES)
    a2a_b = float(np.asarray(pa0.a2a_precision) @ prec)
    grad_b = float(np.asarray(pa0.grad_precision) @ prec)

    # ---- linear per-device quantities as functions of the placement P [T, D]
    const, jac = (jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), x)
                  for x in _linear_parts(system, model, pa0, jnp.float32(a2a_b), jnp.float32(grad_b)))

    # ---- placement-free constants from the start plan and the model's network
    net = coll.make_net(system, pa0.offload)
    # the direct all-to-all: o (t + lat) + (1 - o) min_p (lat_p + t / eff_p) + setup, t = the slowest
    # device's per-link bytes / bandwidth (engines: o = 1; core-driven: NCCL's protocols p)
    fixed = coll.all_to_all_fixed(net, hier=False)
    lat_eng = float(fixed.lat_s) * US
    lat_p = [float(x) * US for x in coll.protocol_times(net, fixed)]
    eff_p = [float(e) for e in net.proto_share]
    setup = float(net.setup_s) * US
    link_names = sorted(set(net.link))
    inv_bw = {k: 1.0 / float(net.link_bw[k]) * US / MB for k in link_names}  # us per MB
    over = [float(o) for o in net.oversub]
    o = float(net.offload)
    t_bf, t_tf, t_tb, t_bb = (ph[k] * US for k in ("bottom_fwd", "top_fwd", "top_bwd", "bottom_bwd"))
    # the per-step overhead follows the optimizer on the compute stream and depends only on the
    # sharding types and settings, which the subproblem holds: the MILP takes it with the optimizer
    t_opt, c_sync = (ph["optimizer"] + ph["overhead"]) * US, ph["dense_sync"] * US
    n_b = float(base.grad_buckets)
    cap = float(bd0.capacity_bytes) * MB
    db_ef, c_ef = _lookup_contention(system, model, net, pa0) if base.dense == "fully_sharded" and D > 1 else (0.0, 0.0)

    seen, slow = [], {k: float(bd0.contention[k]) for k in ("backward", "bottom_bwd")}
    for _ in range(MAX_ROUNDS):
        ranks, milp, terms, status, gap = _solve(dict(
            T=T, D=D, system=system, const=const, jac=jac, net=net, link_names=link_names, inv_bw=inv_bw, over=over,
            o=o, lat_eng=lat_eng, lat_p=lat_p, eff_p=eff_p, setup=setup, t_bf=t_bf, t_tf=t_tf, t_tb=t_tb, t_bb=t_bb,
            t_opt=t_opt, c_sync=c_sync, n_b=n_b, cap=cap, db_ef=db_ef, c_ef=c_ef, big=4.0 * float(bd0.step_s) * US + 1.0,
            time_limit_s=time_limit_s, allowed=allowed), slow)
        plan = subproblem_plan(start, model, ranks)
        bd = evaluate(system, model, plan)
        if ranks in seen:
            break
        seen.append(ranks)
        slow = {k: float(bd.contention[k]) for k in slow}
    hard = float(bd.step_s)
    return plan, {"milp_step_s": milp, "hard_step_s": hard, "status": status, "terms": terms,
                  "mip_gap": gap, "binaries": T * D, "rounds": len(seen)}


MAX_ROUNDS = 6       # MILP solves at most, each at the previous solution's contention


def _lookup_contention(system, model, net, pa0) -> tuple[float, float]:
    """A fully sharded dense part's parameter all-gather runs beside the embedding lookups and slows
    them by the HBM share it takes (evaluate's x_ef): added time min(db e_f, c db / (1 + db)) per
    device, with db and c (us) fixed by the settings. Returns (db, c)."""
    from ..cost import contention
    chip, top = system.chip, len(system.levels) - 1
    p_bytes = float(model.dense.params()) * float(model.param_bytes)
    D = system.num_chips
    c = float(coll.all_gather(net, jnp.float32(p_bytes), 0, top, pa0.algorithm[COLLECTIVE_AG, :])) / 2.0
    mult = float(net.offload) * float(chip.dma_hbm_mult) + (1.0 - float(net.offload)) * float(chip.core_hbm_mult)
    traffic = p_bytes * (D - 1) / D               # half of the sent + received bytes: the forward's gather
    db = float(contention.hbm_excess(chip, mult * traffic / max(c, 1e-12)))
    return db, c * US


def _solve(a: dict, slow: dict):
    """One MILP at the dense backward's slowdowns `slow` (cost/contention.py): the placement, the
    MILP's step, its terms, status and gap."""
    import highspy

    T, D, system, const, jac, net = a["T"], a["D"], a["system"], a["const"], a["jac"], a["net"]
    link_names, inv_bw, over, o = a["link_names"], a["inv_bw"], a["over"], a["o"]
    lat_eng, lat_p, eff_p, setup = a["lat_eng"], a["lat_p"], a["eff_p"], a["setup"]
    t_bf, t_tf, t_tb, t_bb, t_opt, c_sync, n_b, cap, big = (a[k] for k in (
        "t_bf", "t_tf", "t_tb", "t_bb", "t_opt", "c_sync", "n_b", "cap", "big"))
    time_limit_s = a["time_limit_s"]
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(time_limit_s))
    h.setOptionValue("mip_rel_gap", 1e-7)
    h.setOptionValue("mip_feasibility_tolerance", 1e-9)
    h.setOptionValue("random_seed", 0)
    allowed = a["allowed"]            # a device a constraint rules out: x = 0 there
    x = [[h.addVariable(lb=0, ub=float(allowed[t, d] > 0), type=highspy.HighsVarType.kInteger) for d in range(D)]
         for t in range(T)]
    for t in range(T):
        h.addConstr(sum(x[t]) == 1)

    def lin(name, *idx):
        """The model's linear expression of quantity `name` at index idx, in the x variables."""
        c = float(const[name][idx])
        J = jac[name][idx]                   # [T, D]
        return c + sum(float(J[t, d]) * x[t][d] for t in range(T) for d in range(D) if J[t, d] != 0.0)

    var = lambda lb=0.0: h.addVariable(lb=lb, ub=1e12)
    # big-M of the min() choices (a["big"]): every term is below the step time of some plan; a tight M
    # keeps the integrality tolerance from loosening the choice (M x 1e-9 must stay far below a microsecond)

    def a2a(send, recv):
        """Epigraph of the direct all-to-all: X >= per-device, per-link transfer time; C >= its time
        under the protocol the objective picks (one binary per protocol: the min of the model);
        B >= per-device bytes."""
        C, B, X = var(), var(), var()
        K = len(system.levels)
        for d in range(D):
            m = []
            for l in range(K):
                v = var()
                h.addConstr(v >= lin(send, d, l))
                h.addConstr(v >= lin(recv, d, l))
                m.append(v)
            for k in link_names:
                h.addConstr(X >= sum(m[l] * over[l] for l in range(K) if net.link[l] == k) * inv_bw[k])
            h.addConstr(B >= sum(m))
        if o >= 1.0:
            h.addConstr(C >= X + lat_eng + setup)
        else:
            ys = [h.addVariable(lb=0, ub=1, type=highspy.HighsVarType.kInteger) for _ in lat_p]
            h.addConstr(sum(ys) == 1)
            for y, lp, e in zip(ys, lat_p, eff_p):
                h.addConstr(C >= o * (X + lat_eng) + (1.0 - o) * (lp + X / e) + setup - big * (1 - y))
        return C, B

    def vmin(a, b):
        """v = min(a, b) for a v the objective pushes down: one binary, big-M."""
        v, y = var(), h.addVariable(lb=0, ub=1, type=highspy.HighsVarType.kInteger)
        h.addConstr(v >= a - big * y)
        h.addConstr(v >= b - big * (1 - y))
        return v

    C_in, B_in = a2a("is", "ir") if D > 1 else (0.0, 0.0)
    C_out, B_out = a2a("os", "or") if D > 1 else (0.0, 0.0)
    EF = var()
    db_ef, c_ef = a["db_ef"], a["c_ef"]
    x_ef = [vmin(db_ef * lin("ef", d), c_ef * db_ef / (1.0 + db_ef)) if db_ef > 0 else 0.0 for d in range(D)]
    for d in range(D):
        h.addConstr(EF >= lin("ef", d) + x_ef[d])
    T_b = t_tb + t_bb
    # the overlaps' added time, min(T (r - 1), c (1 - 1/r)) at the held slowdowns r (cost/contention.py)
    r_b, r_bb = slow["backward"], slow["bottom_bwd"]
    x_prev = vmin(T_b * (r_b - 1.0), C_in * (1.0 - 1.0 / r_b)) if D > 1 else 0.0
    x_bb = vmin(t_bb * (r_bb - 1.0), (C_out + c_sync) * (1.0 - 1.0 / r_bb)) if D > 1 else 0.0
    tf_end = t_bf + EF + C_out + t_tf
    tb_end = tf_end + t_tb + x_prev
    g_end = tf_end + t_tb + C_out
    bb_end = tb_end + t_bb + x_bb
    EBS, EB, SYNC, STEP = var(), var(), var(), var()
    h.addConstr(EBS >= bb_end)
    h.addConstr(EBS >= g_end)
    for d in range(D):
        h.addConstr(EB >= EBS + lin("eb", d))
        h.addConstr(STEP >= t_bf + lin("ef", d) + x_ef[d] + t_tf + t_tb + t_bb + lin("eb", d) + t_opt + x_prev + x_bb)
        h.addConstr(lin("mem", d) <= cap)
    h.addConstr(SYNC >= tf_end + T_b / n_b + c_sync + C_out)
    h.addConstr(SYNC >= bb_end + c_sync / n_b)
    h.addConstr(SYNC >= g_end + c_sync / n_b)
    h.addConstr(STEP >= EB + t_opt)
    h.addConstr(STEP >= SYNC + t_opt)
    h.addConstr(STEP >= C_in + 2 * C_out + c_sync)
    h.minimize(STEP)
    status = str(h.getModelStatus())
    if "Optimal" not in status:
        raise ConfigError("", "model", f"the exact placement MILP ended with status {status}: no feasible "
                          "table-wise placement within the memory caps")
    ranks = [int(np.argmax([h.val(x[t][d]) for d in range(D)])) for t in range(T)]
    milp = float(h.val(STEP)) / US
    val = lambda e: float(h.val(e)) if not isinstance(e, float) else e
    terms = {"input_dist_us": val(C_in), "output_dist_us": val(C_out), "emb_fwd_max_us": val(EF),
             "emb_bwd_end_us": val(EB), "sync_end_us": val(SYNC)}
    return ranks, milp, terms, status, float(h.getInfo().mip_gap)
