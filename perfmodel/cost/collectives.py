"""Collective algorithms over a hierarchical network, each a latency term plus bytes / bandwidth.

A group spans a contiguous range of network levels; level l joins `fanout_l` sub-domains and has
per-chip bandwidth B_l = B_link x efficiency / oversubscription_l (efficiency: the achievable share
of the line rate, hardware.link_efficiencies) and per-step latency alpha_l. For a group of
n chips, a buffer of S bytes per chip (NCCL's tuning model, src/graph/tuning.cc; nccl-tests'
algbw/busbw conventions):

  ring      all-reduce 2(n-1)/n S / B + 2(n-1) alpha;  reduce-scatter, all-gather half of it.
            Over several levels, NCCL's rings: one ring per channel, laid out domain by domain, each
            crossing a domain boundary through a different chip's link, so a chip sends the share
            e_l / n of its 2(n-1)/n S on level l, where e_l = n/s_(l-1) - n/s_l ring edges first
            cross level l (s: domain sizes in group members); the links run at once (max over
            links). A chunk makes n-1 hops per pass, e_l of them (one fewer at the top level) at
            level l's latency (NCCL tuning.cc: 2(nNodes-1) inter-node steps of an all-reduce).
  tree      all-reduce 2 S / B_min + latency. On engines: 2 log2(n) alpha_max (double binary tree,
            pipelined). Core-driven (NCCL): a chain inside the innermost domain of m chips and a
            double binary tree across the n/m domains, 2 ((m-1) alpha_inner + log2(n/m) alpha_outer)
            (tuning.cc's tree latency); one tree per channel, each leaving the domain through a
            different chip's link, so a chip carries 2 S inside and 2 S / m across domains.
  direct    every chip talks to every peer at once: the bytes to peers at level l go at B_l, links in
            parallel; latency alpha (1 + (n-1)/m) with m messages in flight (offload engines raise m).
            All-reduce: reduce-scatter + all-gather (two-shot).
  nvls      all-reduce in the switch (NVLink SHARP), core-driven, for a group inside one scale-up
            domain whose switch reduces (Level.switch_reduction): each chip's link carries
            S (n+1)/n each way (the switch pulls the chip's whole buffer for the n reductions and
            returns its 1/n shard reduced; the chip stores its reduced shard once, the switch
            multicasts all n shards back) at B_0, plus NVLS_LATENCY_S; no reduction on the cores.
            It is what a core-driven `direct` all-reduce does there when it is faster than the
            two-shot exchange, and what NCCL picks for large all-reduces (nccl_all_reduce).
  hierarchical  reduce-scatter inside the innermost level, the rest on S / fanout one level out,
            all-gather back; all-to-all: exchange inside the domain first, then one aggregated
            message per remote domain (more scale-up bytes, far fewer scale-out messages)

Who drives the collective (Net.offload, in [0, 1], blends the two):
  engines   (offload engines, e.g. MTIA 300's message engines) the formulas above as they stand:
            transfer + per-step latency, reductions at the engines' throughput.
  cores     (NCCL-like kernels, every chip with no engines) each algorithm runs with one of NCCL's
            protocols p in {LL, LL128, Simple} (src/graph/tuning.cc), and the fastest is taken:
              t_p = base_p + sum_steps (alpha_l + step_p[link kind of l]) + bytes-time / eff_p
            base_p: ring base latency 6.6 / 14 / 8.4 us; step_p: the protocol's per-step latency
            over LL's (NVLink 0.6 / 1.9 / 3.4 us, network 2.7 / 4.0 / 14 us per step; the presets'
            alpha_l are the LL figures); eff_p: the share of each line that is data (LL: 8 of
            16 B, flags in the rest; LL128: 120 of 128 B; Simple: all). The min is exact (hard):
            continuous and monotone in every input, gradients those of the fastest protocol, and
            the same in the hard and the relaxed evaluation.

Reductions (all-reduce, reduce-scatter) also need (n-1)/n S bytes reduced per chip: on offload
engines at their aggregate throughput, overlapped with the transfer; on cores, at HBM speed.
All-to-all takes uneven per-device volumes: the slowest device sets the time.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ..cache import traced
from ..hardware import System, level_latency_s, link_bandwidths, link_efficiencies
from .arrays import add_at, lead, xp_of
from .smooth import hard_max, hard_min

RING, DIRECT, TREE, HIER = range(4)

# NCCL's protocols (src/graph/tuning.cc, NCCL 2.x; the latencies also in shared/REFERENCE.md).
PROTOCOLS = ("LL", "LL128", "Simple")
PROTOCOL_BASE_S = (6.6e-6, 14.0e-6, 8.4e-6)          # source: tuning.cc baseLat, ring (REFERENCE.md)
# Per-step latency of each protocol over LL's, by link kind (tuning.cc hwLat, ring: NVLink
# 0.6 / 1.9 / 3.4 us, network 2.7 / 4.0 / 14 us; REFERENCE.md). The presets' per-step latencies
# are the LL ones, so a protocol adds the difference.
PROTOCOL_STEP_S = {"nvlink": (0.0, 1.3e-6, 2.8e-6), "net": (0.0, 1.3e-6, 11.3e-6)}
# Share of each line that carries data (NCCL src/device/prims_ll.h, prims_ll128.h): LL writes
# 8 data + 8 flag bytes per 16-byte line; LL128 120 data + 8 flag bytes per 128; Simple all data.
PROTOCOL_EFFICIENCY = (0.5, 120.0 / 128.0, 1.0)
# NVLS (NVLink SHARP) per-operation latency. assumed: 25 us, tuning.cc hwLat[NVLINK][NVLS][Simple]
# as recalled (verify against your NCCL); it agrees with REFERENCE.md's "NCCL picks NVLS from
# 2 MiB up" on 8 x H200 (tests/test_collectives.py checks that crossover). NVLS runs Simple only.
NVLS_LATENCY_S = 25e-6


@dataclass(frozen=True)
class Net:
    """Per-level view of the network for one evaluation (python lists of static ints and arrays)."""

    fanout: tuple[int, ...]
    size: tuple[int, ...]
    link: tuple[str, ...]
    kind: tuple[str, ...]      # per level: "nvlink" (a dedicated scale-up link) or "net" (through a NIC)
    nvls: tuple[bool, ...]     # per level: its switch reduces (NVLink SHARP)
    bw: list                  # per-chip bytes/s at each level (oversubscription applied)
    link_bw: dict             # per-chip bytes/s of each link
    oversub: list
    alpha: list               # seconds per algorithm step at each level (LL protocol for cores)
    msgs: object              # messages in flight
    offload: object           # share of collectives on offload engines, in [0, 1]
    engine_Bps: object        # aggregate reduction throughput of the engines
    setup_s: object           # per-collective fixed cost (engine setup or kernel launch)
    hbm_Bps: object
    proto_base: tuple = PROTOCOL_BASE_S       # core-driven protocols (module docstring)
    proto_step: dict = None
    proto_eff: tuple = PROTOCOL_EFFICIENCY
    nvls_latency_s: object = NVLS_LATENCY_S


class Parts(NamedTuple):
    """One transfer: its bytes at the links' full rate, its per-step latency at the presets' alpha,
    and how many steps it makes on each link kind (for the protocols' extra latency)."""

    bytes_s: object
    lat_s: object
    steps: dict


def make_net(system: System, offload) -> Net:
    up, out = link_bandwidths(system)
    e_up, e_out = link_efficiencies(system)
    links = {"scale_up": up * e_up, "scale_out": out * e_out}
    fan, size, link, kind, nvls, bw, over, alpha = [], [], [], [], [], [], [], []
    prev = 1
    for lv in system.levels:
        fan.append(lv.size // prev)
        size.append(lv.size)
        prev = lv.size
        link.append(lv.link)
        kind.append("nvlink" if lv.link == "scale_up" and not system.nic.serves_scale_up else "net")
        nvls.append(bool(lv.switch_reduction) and lv.link == "scale_up")
        bw.append(links[lv.link] / lv.oversubscription)
        over.append(lv.oversubscription)
        alpha.append(level_latency_s(system, lv))
    off, chip = system.offload, system.chip
    o = offload * (off.engines > 0)          # no engines: collectives run on the cores
    msgs = o * off.engines * off.msgs_per_engine + (1.0 - o) * chip.core_msgs_in_flight
    engine_Bps = off.engines * off.clock_Hz * off.reduce_bytes_per_cycle_all_busy
    setup = o * off.setup_s + (1.0 - o) * chip.launch_s
    return Net(tuple(fan), tuple(size), tuple(link), tuple(kind), tuple(nvls), bw, links, over, alpha,
               msgs, o, engine_Bps, setup, chip.hbm_Bps * chip.hbm_eff, proto_step=dict(PROTOCOL_STEP_S))


# ------------------------------------------------------------------------ who drives: engines or cores

def protocol_times(net: Net, p: Parts) -> list:
    """Core-driven time of the transfer under each of NCCL's protocols (module docstring)."""
    out = []
    for i in range(len(PROTOCOLS)):
        extra = 0.0
        for k, c in p.steps.items():
            extra = extra + c * net.proto_step[k][i]
        out.append(net.proto_base[i] + p.lat_s + extra + p.bytes_s / net.proto_eff[i])
    return out


def _blend(net: Net, pair):
    eng, core = pair
    o = lead(net.offload, eng)
    return o * eng + (1.0 - o) * core


# ------------------------------------------------------------------------------------ the algorithms
#
# An algorithm's time is a sum of transfers ("components": a hierarchical all-reduce is a ring
# reduce-scatter inside the domain, an all-reduce one level out on S / fanout and a ring all-gather),
# each linear in S, on the engines and on the cores:
#   bytes    S max_j sum_l C[j, l] / B_l    j: the links, which run at once (or, for the engines' tree,
#                                              the levels: the slowest sets the pace)
#   latency  sum_f (H[0, f] + H[1, f] / m) a_f    a: each level's alpha, then the largest alpha of
#                                              each span of levels; m: messages in flight
#   steps    per link kind, the same way (the core-driven protocols' extra latency per step)
#   reduced  the share of S reduced per chip (engines: at their throughput; cores: at HBM speed)
# The coefficients depend only on the network's shape: numpy, built once per shape (_table). The
# evaluation (_algorithm_times) combines them with the traced bandwidths and latencies for all
# algorithms, components and protocols at once in a few array operations (products and sums, never
# einsum or @: a matrix product in the program makes XLA:CPU call oneDNN, which builds its kernels at
# the program's first call; embedding._over_tables). (A Python loop over
# levels, algorithms and protocols traced the same formulas as ~2,200 scalar operations per
# evaluation, 70 % of the step model's program and most of its compile time.)

KINDS = ("nvlink", "net")
LINKS = ("scale_up", "scale_out")


class _Comp(NamedTuple):
    """One transfer's static coefficients (see above); J = max(K, 2) rows, F alpha features."""

    eng_bytes: np.ndarray      # [J, K]
    eng_lat: np.ndarray        # [2, F]
    core_bytes: np.ndarray     # [J, K]
    core_lat: np.ndarray       # [2, F]
    steps: np.ndarray          # [2, len(KINDS)]: steps, steps per message in flight
    reduced: float


def _spans(K: int) -> list:
    return [(i, j) for i in range(K) for j in range(i + 1, K)]


def _feature(K: int, lo: int, hi: int) -> int:
    """Index of the largest alpha over levels lo..hi among the alpha features."""
    return lo if lo == hi else K + _spans(K).index((lo, hi))


def _blank(K: int):
    return np.zeros((max(K, 2), K)), np.zeros((2, K + len(_spans(K)))), np.zeros((2, len(KINDS)))


def _ring_c(shape, lo: int, hi: int, passes: int, scale: float, reduce: bool) -> _Comp:
    """`passes` ring passes (2: all-reduce, 1: reduce-scatter / all-gather) of scale x S over
    levels lo..hi (module docstring). One level: passes ((n-1)/n S / B + (n-1) alpha)."""
    fanout, size, link, kind = shape
    n, inner = math.prod(fanout[lo:hi + 1]), math.prod(fanout[:lo])
    C, H, steps = _blank(len(fanout))
    below = 1                                            # group members per level-(l-1) domain
    for l in range(lo, hi + 1):
        members = n if l == hi else size[l] // inner
        edges = (n // below if n // below > 1 else 0) - (n // members if n // members > 1 else 0)
        hops = edges - 1 if l == hi else edges
        below = members
        C[LINKS.index(link[l]), l] += scale * passes * (n - 1) / n * edges / n
        H[0, l] += passes * hops
        steps[0, KINDS.index(kind[l])] += passes * hops
    return _Comp(C, H, C, H, steps, (n - 1) / n * scale if reduce else 0.0)


def _direct_c(shape, lo: int, hi: int, scale: float, reduce: bool) -> _Comp:
    """Every chip sends scale x S / n to every peer of the group at once (links in parallel);
    latency alpha_max (1 + (n-1)/m)."""
    fanout, size, link, kind = shape
    K = len(fanout)
    n, inner = math.prod(fanout[lo:hi + 1]), math.prod(fanout[:lo])
    C, H, steps = _blank(K)
    below = 1
    for l in range(lo, hi + 1):
        peers = size[l] // inner - below                 # peers first reached at level l
        below = size[l] // inner
        C[LINKS.index(link[l]), l] += scale * peers / n
    H[:, _feature(K, lo, hi)] = (1.0, n - 1.0)
    steps[:, KINDS.index(kind[hi])] = (1.0, n - 1.0)
    return _Comp(C, H, C, H, steps, (n - 1) / n * scale if reduce else 0.0)


def _tree_c(shape, lo: int, hi: int, scale: float) -> _Comp:
    """The tree all-reduce (module docstring): engines 2 S / B_min + 2 log2(n) alpha_max; cores a
    chain in the innermost domain of m chips and a double binary tree across domains."""
    fanout, _, link, kind = shape
    K = len(fanout)
    n, m = math.prod(fanout[lo:hi + 1]), fanout[lo]
    outer = n // m
    Ce, He, _ = _blank(K)
    for l in range(lo, hi + 1):
        Ce[l, l] = 2.0 * scale                           # the slowest level's 2 S / B_l
    He[0, _feature(K, lo, hi)] = 2 * math.ceil(math.log2(n))
    # NCCL runs one tree per channel, each leaving the domain through a different chip's link: the
    # 2 S a domain sends up and down the inter-domain tree is spread over the domain's members
    Cc, Hc, steps = _blank(K)
    Cc[LINKS.index(link[lo]), lo] += 2.0 * scale
    below = m
    for l in range(lo + 1, hi + 1):
        Cc[LINKS.index(link[l]), l] += 2.0 * scale / below
        below *= fanout[l]
    Hc[0, lo] += 2 * (m - 1)
    steps[0, KINDS.index(kind[lo])] += 2 * (m - 1)
    if outer > 1:
        k = 2 * math.ceil(math.log2(outer))
        Hc[0, _feature(K, lo + 1, hi)] += k
        steps[0, KINDS.index(kind[hi])] += k
    return _Comp(Ce, He, Cc, Hc, steps, (n - 1) / n * scale)


def _rs_or_ag_c(shape, lo: int, hi: int, algo: int, reduce: bool, scale: float = 1.0) -> list:
    """Components of a reduce-scatter (reduce=True) or all-gather. Tree has no reduce-scatter /
    all-gather form: it runs the ring."""
    if math.prod(shape[0][lo:hi + 1]) == 1:
        return []
    if algo == HIER and hi > lo:
        return (_rs_or_ag_c(shape, lo, lo, RING, reduce, scale)
                + _rs_or_ag_c(shape, lo + 1, hi, HIER, reduce, scale / shape[0][lo]))
    if algo == DIRECT:
        return [_direct_c(shape, lo, hi, scale, reduce)]
    return [_ring_c(shape, lo, hi, 1, scale, reduce)]


def _all_reduce_c(shape, lo: int, hi: int, algo: int, scale: float = 1.0) -> list:
    if math.prod(shape[0][lo:hi + 1]) == 1:
        return []
    if algo == RING or (algo == HIER and hi == lo):
        return [_ring_c(shape, lo, hi, 2, scale, True)]
    if algo == TREE:
        return [_tree_c(shape, lo, hi, scale)]
    if algo == DIRECT:        # two-shot: reduce-scatter + all-gather (NVLS where the switch reduces)
        return _rs_or_ag_c(shape, lo, hi, DIRECT, True, scale) + _rs_or_ag_c(shape, lo, hi, DIRECT, False, scale)
    return (_rs_or_ag_c(shape, lo, lo, RING, True, scale)
            + _all_reduce_c(shape, lo + 1, hi, HIER, scale / shape[0][lo])
            + _rs_or_ag_c(shape, lo, lo, RING, False, scale))


@functools.cache
def _table(shape, op: str, lo: int, hi: int):
    """Every algorithm's components, padded to one count: arrays [ALGORITHMS, C, ...] and `live`
    [ALGORITHMS, C] (1 for a real component: it pays the protocol's base latency); None when the
    group is a single chip."""
    if math.prod(shape[0][lo:hi + 1]) == 1:
        return None
    comps = [_all_reduce_c(shape, lo, hi, a) if op == "all_reduce" else
             _rs_or_ag_c(shape, lo, hi, a, op == "reduce_scatter") for a in range(4)]
    width = max(len(c) for c in comps)
    empty = _Comp(*(np.zeros_like(x) for x in comps[0][0][:5]), 0.0)
    rows = [c + [empty] * (width - len(c)) for c in comps]
    fields = {f: np.asarray([[getattr(c, f) for c in row] for row in rows], np.float32) for f in _Comp._fields}
    fields["live"] = np.asarray([[1.0] * len(c) + [0.0] * (width - len(c)) for c in comps], np.float32)
    return fields


def _shape(net: Net):
    return net.fanout, net.size, net.link, net.kind


def _f32(x):
    return xp_of(x).asarray(x, np.float32)


def _memo(net: Net) -> dict:
    """Where the terms of a Net made inside a trace (evaluate's) are kept for its other collectives;
    a Net of concrete values gets a fresh dict each time (terms computed under some later trace
    must not outlive it), but for numpy's, made for one evaluation of a batch of plans."""
    if traced((net.alpha, net.bw, net.msgs)) or isinstance(net.msgs, np.ndarray):
        return net.__dict__.setdefault("_memo", {})
    return {}


def _terms(net: Net):
    """The traced network terms every collective of `net` uses, computed once per Net: inverse
    bandwidth per level [K], alpha features [F], (1, 1/m), each link kind's extra latency per step
    under each protocol [KINDS, P], the protocols' base latency and data share [P]. In numpy (a
    batch of plans: cost.arrays) (1, 1/m) is [N, 2], the rest the same."""
    memo = _memo(net)
    if "terms" not in memo:
        xp = xp_of(net.msgs, *net.alpha, *net.bw)
        K = len(net.fanout)
        alpha = [_f32(a) for a in net.alpha]
        feats = list(alpha)
        for i, j in _spans(K):
            top = alpha[i]
            for l in range(i + 1, j + 1):
                top = xp.maximum(top, alpha[l])
            feats.append(top)
        inv_m = 1.0 / _f32(net.msgs)
        memo["terms"] = (
            1.0 / xp.stack([_f32(b) for b in net.bw]), xp.stack(feats),
            xp.stack([xp.ones_like(inv_m) if np.ndim(inv_m) else xp.ones(()), inv_m], axis=-1),
            xp.stack([xp.stack([_f32(x) for x in net.proto_step[k]]) for k in KINDS]),
            xp.stack([_f32(b) for b in net.proto_base]), xp.stack([_f32(e) for e in net.proto_eff]))
    return memo["terms"]


def _against(per_plan, static, own: int):
    """A per-plan array ([..., *own axes]) against static coefficients with more leading axes: in
    numpy (a batch [N, ...]) singleton axes inserted after the batch axis; as it is otherwise."""
    if not isinstance(per_plan, np.ndarray) or per_plan.ndim == own:
        return per_plan
    extra = np.ndim(static) - own
    return per_plan.reshape(per_plan.shape[:per_plan.ndim - own] + (1,) * extra + per_plan.shape[per_plan.ndim - own:])


def _latency(net: Net, H):
    """Latency of static coefficients H [..., 2, F]: sum_f (H0 + H1 / m) a_f."""
    _, feats, per_msg, *_ = _terms(net)
    H = np.asarray(H, np.float32)
    return xp_of(per_msg, feats).sum(H * _against(per_msg[..., :, None] * feats, H, 2), axis=(-2, -1))


def _per_protocol(net: Net, lat, steps, live):
    """Latency [..., P] under each core-driven protocol: `lat` plus the protocol's extra latency per
    step (steps [..., 2, KINDS], per step and per step per message in flight) and its base latency
    where `live` (1 for a real transfer, 0 for padding)."""
    _, _, per_msg, step, base, _ = _terms(net)
    xp = xp_of(per_msg, step, lat)
    steps = np.asarray(steps, np.float32)
    per_kind = xp.sum(steps * _against(per_msg[..., :, None], steps, 2), axis=-2)       # [..., KINDS]
    extra = xp.sum(per_kind[..., None] * step, axis=-2)                                 # [..., P]
    return lat[..., None] + extra + np.asarray(live, np.float32)[..., None] * base


def _coefficients(net: Net, op: str, lo: int, hi: int):
    """Per algorithm and component ([A, C]): engines' bytes and latency coefficients, cores' bytes
    coefficient per protocol and latency per protocol ([A, C, P]), and the share reduced; computed
    once per Net and collective kind."""
    memo = _memo(net)
    key = (op, lo, hi)
    if key not in memo:
        tab = _table(_shape(net), op, lo, hi)
        inv_bw, *_, eff = _terms(net)
        slowest = lambda C: hard_max(xp_of(inv_bw).sum(C * inv_bw, axis=-1), -1)
        core_lat = _per_protocol(net, _latency(net, tab["core_lat"]), tab["steps"], tab["live"])
        memo[key] = (slowest(tab["eng_bytes"]), _latency(net, tab["eng_lat"]), slowest(tab["core_bytes"])[..., None] / eff,
                     core_lat, tab["reduced"])
    return memo[key]


def _algorithm_times(net: Net, op: str, S, lo: int, hi: int):
    """(engines, cores), each [..., ALGORITHMS]: every algorithm's time for S bytes per chip
    (S of any shape); the cores take each component's fastest protocol, an exact min."""
    S = _f32(S)
    xp = xp_of(S, net.msgs, net.engine_Bps)
    if xp is np and np.ndim(net.msgs):      # a batch of plans: S per plan, [N] (cost.arrays)
        S = np.broadcast_to(S, np.broadcast_shapes(S.shape, np.shape(net.msgs)))
    if _table(_shape(net), op, lo, hi) is None:
        z = xp.zeros(S.shape + (4,), np.float32)
        return z, z
    eng_b, eng_l, core_b, core_l, reduced = _coefficients(net, op, lo, hi)
    s = S[..., None, None]                                  # against [A, C]
    eng = xp.maximum(eng_l + s * eng_b, s * reduced / xp.maximum(net.engine_Bps, 1.0))
    core = hard_min(core_l + s[..., None] * core_b, -1)
    core = xp.maximum(core, s * reduced * 3.0 / net.hbm_Bps)         # read two operands, write one
    eng, core = xp.sum(eng, axis=-1), xp.sum(core, axis=-1)
    if op == "all_reduce" and has_nvls(net, lo, hi):
        core = xp.concatenate([core[..., :DIRECT], xp.minimum(core[..., DIRECT:DIRECT + 1], _nvls(net, S)[..., None]),
                               core[..., DIRECT + 1:]], axis=-1)
    return eng, core


def _collective(net: Net, op: str, S, lo: int, hi: int, probs):
    """The algorithms' times weighted by `probs` (one-hot, or relaxed), plus the fixed setup."""
    eng, core = _algorithm_times(net, op, S, lo, hi)
    return xp_of(eng, probs).sum(_blend(net, (eng, core)) * probs, axis=-1) + net.setup_s * _nonempty(net, lo, hi)


def _ring(net: Net, S, lo: int, hi: int, passes: int) -> Parts:
    """The ring's transfer as Parts (bytes time, latency, steps per link kind), e.g. for
    protocol_times."""
    c = _ring_c(_shape(net), lo, hi, passes, 1.0, False)
    inv_bw = _terms(net)[0]
    per_link = jnp.sum(jnp.asarray(c.core_bytes, jnp.float32) * inv_bw, axis=-1)
    return Parts(_f32(S) * hard_max(jnp.ravel(per_link), 0), _latency(net, c.core_lat),
                 {k: float(c.steps[0, i]) for i, k in enumerate(KINDS) if c.steps[0, i]})


def reduce_scatter(net: Net, S, lo: int, hi: int, probs):
    return _collective(net, "reduce_scatter", S, lo, hi, probs)


def all_gather(net: Net, S, lo: int, hi: int, probs):
    return _collective(net, "all_gather", S, lo, hi, probs)


def all_reduce(net: Net, S, lo: int, hi: int, probs):
    return _collective(net, "all_reduce", S, lo, hi, probs)


def _nonempty(net: Net, lo: int, hi: int) -> float:
    return 1.0 if hi >= lo and math.prod(net.fanout[lo:hi + 1]) > 1 else 0.0


def has_nvls(net: Net, lo: int, hi: int) -> bool:
    """NVLS serves a group inside one scale-up domain whose switch reduces."""
    return lo == hi == 0 and net.nvls[0] and math.prod(net.fanout[:1]) > 1


def _nvls(net: Net, S):
    """Core-driven NVLS all-reduce (module docstring): S (n+1)/n each way at B_0, Simple protocol."""
    n = net.fanout[0]
    return S * (n + 1) / n / net.bw[0] + net.nvls_latency_s


def nvls_all_reduce(net: Net, S, lo: int, hi: int):
    """NVLS all-reduce, core-driven (module docstring); only where has_nvls(net, lo, hi)."""
    if not has_nvls(net, lo, hi):
        raise ValueError("NVLS needs a group inside one scale-up domain whose switch reduces "
                         "(network level switch_reduction = true)")
    return _nvls(net, S) + net.setup_s


def nccl_all_reduce(net: Net, S, lo: int, hi: int):
    """NCCL's own choice for a core-driven all-reduce: the fastest of its algorithms the model has
    (ring, tree, and NVLS where the switch reduces), each with its fastest protocol."""
    if math.prod(net.fanout[lo:hi + 1]) == 1:
        return jnp.zeros_like(_f32(S))
    _, core = _algorithm_times(net, "all_reduce", S, lo, hi)
    t = jnp.minimum(core[..., RING], core[..., TREE])
    if has_nvls(net, lo, hi):
        t = jnp.minimum(t, _nvls(net, _f32(S)))
    return t + net.setup_s


def _a2a_c(shape, hier: bool) -> _Comp:
    """The all-to-all's latency and steps (its transfer is the devices' volumes, not a coefficient):
    alpha_l (1 + (peers_l - 1) / m) at each level; hierarchical: one aggregated message per remote
    domain, peers_l / fanout_0 beyond the first level."""
    fanout, size, _, kind = shape
    C, H, steps = _blank(len(fanout))
    below = 1
    for l in range(len(fanout)):
        peers = size[l] - below
        below = size[l]
        if peers <= 0:
            continue
        if hier and l > 0:
            peers = max(peers // fanout[0], 1)
        H[:, l] += (1.0, peers - 1.0)
        steps[:, KINDS.index(kind[l])] += (1.0, peers - 1.0)
    return _Comp(C, H, C, H, steps, 0.0)


def all_to_all_fixed(net: Net, hier: bool) -> Parts:
    """The all-to-all's per-step latency and steps per link kind (its transfer left at 0): direct,
    or hierarchical (one aggregated message per remote domain)."""
    c = _a2a_c(_shape(net), hier)
    per_msg = _terms(net)[2]
    steps = {k: jnp.sum(per_msg * jnp.asarray(c.steps[:, i], jnp.float32)) for i, k in enumerate(KINDS) if c.steps[:, i].any()}
    return Parts(0.0, _latency(net, c.core_lat), steps)


def all_to_all(net: Net, send, recv, probs, temperature_max):
    """Uneven all-to-all over all levels. send/recv: [D, K] bytes per device to/from peers first
    reached at level l. probs over ALGORITHMS (direct and hierarchical are the all-to-all forms).

    Direct: t = max_d max_link sum_{l on link} max(send_dl, recv_dl) o_l / B_link
                + sum_l alpha_l (1 + (peers_l - 1) / m)
    Hierarchical: traffic for remote domains crosses the scale-up level first (added to level 0),
    and each chip sends one aggregated message per remote domain: peers_l / fanout_0.
    Core-driven: with the fastest protocol, as every collective (module docstring).
    """
    K = len(net.fanout)
    xp = xp_of(send, recv, net.msgs)
    if net.size[-1] == 1:
        return xp.zeros(np.shape(probs)[:-1], np.float32)
    inv_bw, *_, eff = _terms(net)
    on_link = np.asarray([[lk == k for k in LINKS] for lk in net.link], np.float32)     # [K, links]

    def transfer(vol):          # the slowest device's busiest link
        return temperature_max(hard_max(xp.sum((vol * inv_bw)[..., None] * on_link, axis=-2), -1))

    vol = xp.maximum(send, recv)                      # [D, K]
    forms = [transfer(vol)]
    if K > 1:
        forms.append(transfer(add_at(vol, (0,), xp.sum(vol[..., 1:], axis=-1))))
    fixed = [_a2a_c(_shape(net), hier) for hier in (False, True)[:len(forms)]]
    t = xp.stack(forms, axis=-1)
    lat = _latency(net, np.stack([c.core_lat for c in fixed]))                         # [forms]
    core_lat = _per_protocol(net, lat, np.stack([c.steps for c in fixed]), np.ones(len(fixed)))
    timed = _blend(net, (t + lat, hard_min(core_lat + t[..., None] / eff, -1)))
    direct, hier = timed[..., 0], timed[..., -1]
    return (probs[..., DIRECT] * direct + probs[..., HIER] * hier + (probs[..., RING] + probs[..., TREE]) * direct
            + net.setup_s)
