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

import math
from dataclasses import dataclass
from typing import NamedTuple

import jax.numpy as jnp

from ..hardware import System, level_latency_s, link_bandwidths, link_efficiencies

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

def _engine_time(p: Parts):
    return p.bytes_s + p.lat_s


def protocol_times(net: Net, p: Parts) -> list:
    """Core-driven time of the transfer under each of NCCL's protocols (module docstring)."""
    out = []
    for i in range(len(PROTOCOLS)):
        extra = 0.0
        for k, c in p.steps.items():
            extra = extra + c * net.proto_step[k][i]
        out.append(net.proto_base[i] + p.lat_s + extra + p.bytes_s / net.proto_eff[i])
    return out


def _core_time(net: Net, p: Parts):
    """The fastest protocol: an exact min (continuous, monotone; the active protocol's gradient)."""
    ts = protocol_times(net, p)
    out = ts[0]
    for t in ts[1:]:
        out = jnp.minimum(out, t)
    return out


def _moved(net: Net, p: Parts):
    """(engines, cores) time of a transfer with no reduction."""
    return _engine_time(p), _core_time(net, p)


def _reduce(net: Net, p: Parts, reduced_bytes):
    """(engines, cores): the transfer overlapped with the reduction, engines at their throughput,
    cores at HBM speed."""
    eng = reduced_bytes / jnp.maximum(net.engine_Bps, 1.0)
    core = 3.0 * reduced_bytes / net.hbm_Bps       # read two operands, write one
    return jnp.maximum(_engine_time(p), eng), jnp.maximum(_core_time(net, p), core)


def _blend(net: Net, pair):
    eng, core = pair
    return net.offload * eng + (1.0 - net.offload) * core


def _add(*pairs):
    return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


# ------------------------------------------------------------------------------------ the algorithms

def _span(net: Net, lo: int, hi: int):
    n = math.prod(net.fanout[lo:hi + 1])
    bw = net.bw[lo]
    alpha = net.alpha[lo]
    for l in range(lo + 1, hi + 1):
        bw = jnp.minimum(bw, net.bw[l])
        alpha = jnp.maximum(alpha, net.alpha[l])
    return n, bw, alpha


def _direct_bytes_time(net: Net, S, lo: int, hi: int):
    """Time for each chip to send S/n to every peer of the group at once (links in parallel)."""
    n = math.prod(net.fanout[lo:hi + 1])
    inner = math.prod(net.fanout[:lo])
    per_link = {}
    below = 1
    for l in range(lo, hi + 1):
        peers = (net.size[l] // inner) - below          # peers first reached at level l
        below = net.size[l] // inner
        t = S * peers / n * net.oversub[l]
        per_link[net.link[l]] = per_link.get(net.link[l], 0.0) + t
    return _max_links(net, per_link)


def _ring(net: Net, S, lo: int, hi: int, passes: int) -> Parts:
    """Transfer + latency of `passes` ring passes (2: all-reduce, 1: reduce-scatter / all-gather)
    over levels lo..hi (see the module docstring). One level: passes ((n-1)/n S / B + (n-1) alpha)."""
    n = math.prod(net.fanout[lo:hi + 1])
    inner = math.prod(net.fanout[:lo])
    per_link, lat, steps = {}, 0.0, {}
    below = 1                                            # group members per level-(l-1) domain
    for l in range(lo, hi + 1):
        size = n if l == hi else net.size[l] // inner
        edges = (n // below if n // below > 1 else 0) - (n // size if n // size > 1 else 0)
        hops = edges - 1 if l == hi else edges
        below = size
        per_link[net.link[l]] = per_link.get(net.link[l], 0.0) + passes * (n - 1) / n * S * edges / n * net.oversub[l]
        lat = lat + passes * hops * net.alpha[l]
        steps[net.kind[l]] = steps.get(net.kind[l], 0.0) + passes * hops
    return Parts(_max_links(net, per_link), lat, steps)


def _max_links(net: Net, per_link_bytes: dict):
    times = [b / net.link_bw[k] for k, b in per_link_bytes.items()]
    out = times[0]
    for t in times[1:]:
        out = jnp.maximum(out, t)
    return out


def _zero(S):
    z = jnp.zeros_like(jnp.asarray(S, jnp.float32))
    return z, z


def _rs_or_ag(net: Net, S, lo: int, hi: int, algo: int, reduce: bool):
    """(engines, cores) time of a reduce-scatter (reduce=True) or all-gather."""
    n, bw, alpha = _span(net, lo, hi)
    if n == 1:
        return _zero(S)
    frac = (n - 1) / n
    if algo == HIER and hi > lo:
        inner = _rs_or_ag(net, S, lo, lo, RING, reduce)
        rest = _rs_or_ag(net, S / net.fanout[lo], lo + 1, hi, HIER, reduce)
        return _add(inner, rest)
    if algo == DIRECT:
        hops = 1.0 + (n - 1) / net.msgs
        p = Parts(_direct_bytes_time(net, S, lo, hi), alpha * hops, {net.kind[hi]: hops})
    else:  # ring (tree has no reduce-scatter/all-gather form; it falls back to ring)
        p = _ring(net, S, lo, hi, 1)
    return _reduce(net, p, frac * S) if reduce else _moved(net, p)


def reduce_scatter(net: Net, S, lo: int, hi: int, probs):
    return sum(probs[a] * _blend(net, _rs_or_ag(net, S, lo, hi, a, True)) for a in range(4)) + net.setup_s * _nonempty(net, lo, hi)


def all_gather(net: Net, S, lo: int, hi: int, probs):
    return sum(probs[a] * _blend(net, _rs_or_ag(net, S, lo, hi, a, False)) for a in range(4)) + net.setup_s * _nonempty(net, lo, hi)


def _nonempty(net: Net, lo: int, hi: int) -> float:
    return 1.0 if hi >= lo and math.prod(net.fanout[lo:hi + 1]) > 1 else 0.0


def has_nvls(net: Net, lo: int, hi: int) -> bool:
    """NVLS serves a group inside one scale-up domain whose switch reduces."""
    return lo == hi == 0 and net.nvls[0] and math.prod(net.fanout[:1]) > 1


def _nvls(net: Net, S, lo: int, hi: int):
    """Core-driven NVLS all-reduce (module docstring): S (n+1)/n each way at B_0, Simple protocol."""
    n = net.fanout[0]
    return S * (n + 1) / n / net.bw[0] + net.nvls_latency_s


def _tree(net: Net, S, lo: int, hi: int) -> tuple[Parts, Parts]:
    """(engines, cores) parts of the tree all-reduce (module docstring)."""
    n, bw, alpha = _span(net, lo, hi)
    b = 2 * S / bw
    eng = Parts(b, 2 * math.ceil(math.log2(n)) * alpha, {net.kind[hi]: 2 * math.ceil(math.log2(n))})
    m = net.fanout[lo]
    outer = n // m
    # NCCL runs one tree per channel, each leaving the domain through a different chip's link: the
    # 2 S a domain sends up and down the inter-domain tree is spread over the domain's members
    per_link = {net.link[lo]: 2 * S * net.oversub[lo]}
    below = m
    for l in range(lo + 1, hi + 1):
        per_link[net.link[l]] = per_link.get(net.link[l], 0.0) + 2 * S / below * net.oversub[l]
        below *= net.fanout[l]
    b_core = _max_links(net, per_link)
    lat = 2 * (m - 1) * net.alpha[lo]
    steps = {net.kind[lo]: 2.0 * (m - 1)}
    if outer > 1:
        _, _, a_out = _span(net, lo + 1, hi)
        k = 2 * math.ceil(math.log2(outer))
        lat = lat + k * a_out
        steps[net.kind[hi]] = steps.get(net.kind[hi], 0.0) + k
    return eng, Parts(b_core, lat, steps)


def _all_reduce(net: Net, S, lo: int, hi: int, algo: int):
    """(engines, cores) time of an all-reduce with one algorithm."""
    n, bw, alpha = _span(net, lo, hi)
    if n == 1:
        return _zero(S)
    frac = (n - 1) / n
    if algo == RING:
        return _reduce(net, _ring(net, S, lo, hi, 2), frac * S)
    if algo == TREE:
        eng, core = _tree(net, S, lo, hi)
        return _reduce(net, eng, frac * S)[0], _reduce(net, core, frac * S)[1]
    if algo == DIRECT:
        eng, core = _add(_rs_or_ag(net, S, lo, hi, DIRECT, True), _rs_or_ag(net, S, lo, hi, DIRECT, False))
        if has_nvls(net, lo, hi):
            core = jnp.minimum(core, _nvls(net, S, lo, hi))
        return eng, core
    if hi == lo:
        return _all_reduce(net, S, lo, hi, RING)
    inner_rs = _rs_or_ag(net, S, lo, lo, RING, True)
    rest = _all_reduce(net, S / net.fanout[lo], lo + 1, hi, HIER)
    inner_ag = _rs_or_ag(net, S, lo, lo, RING, False)
    return _add(inner_rs, rest, inner_ag)


def all_reduce(net: Net, S, lo: int, hi: int, probs):
    return sum(probs[a] * _blend(net, _all_reduce(net, S, lo, hi, a)) for a in range(4)) + net.setup_s * _nonempty(net, lo, hi)


def nvls_all_reduce(net: Net, S, lo: int, hi: int):
    """NVLS all-reduce, core-driven (module docstring); only where has_nvls(net, lo, hi)."""
    if not has_nvls(net, lo, hi):
        raise ValueError("NVLS needs a group inside one scale-up domain whose switch reduces "
                         "(network level switch_reduction = true)")
    return _nvls(net, S, lo, hi) + net.setup_s


def nccl_all_reduce(net: Net, S, lo: int, hi: int):
    """NCCL's own choice for a core-driven all-reduce: the fastest of its algorithms the model has
    (ring, tree, and NVLS where the switch reduces), each with its fastest protocol."""
    if math.prod(net.fanout[lo:hi + 1]) == 1:
        return _zero(S)[0]
    t = jnp.minimum(_all_reduce(net, S, lo, hi, RING)[1], _all_reduce(net, S, lo, hi, TREE)[1])
    if has_nvls(net, lo, hi):
        t = jnp.minimum(t, _nvls(net, S, lo, hi))
    return t + net.setup_s


def all_to_all_fixed(net: Net, hier: bool) -> Parts:
    """The all-to-all's per-step latency and steps per link kind (its transfer left at 0): direct,
    or hierarchical (one aggregated message per remote domain)."""
    lat, steps = 0.0, {}
    below = 1
    for l in range(len(net.fanout)):
        peers = net.size[l] - below
        below = net.size[l]
        if peers <= 0:
            continue
        if hier and l > 0:
            peers = max(peers // net.fanout[0], 1)
        hops = 1.0 + (peers - 1) / net.msgs
        lat = lat + net.alpha[l] * hops
        steps[net.kind[l]] = steps.get(net.kind[l], 0.0) + hops
    return Parts(0.0, lat, steps)


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
    D = net.size[-1]
    if D == 1:
        return jnp.zeros(())
    vol = jnp.maximum(send, recv)                     # [D, K]
    def timed(vol_k, hier):
        per_link = {}
        for l in range(K):
            per_link.setdefault(net.link[l], 0.0)
            per_link[net.link[l]] = per_link[net.link[l]] + vol_k[:, l] * net.oversub[l]
        t = None
        for k, b in per_link.items():
            tk = b / net.link_bw[k]
            t = tk if t is None else jnp.maximum(t, tk)
        t = temperature_max(t)
        fixed = all_to_all_fixed(net, hier)
        return _blend(net, _moved(net, Parts(t, fixed.lat_s, fixed.steps)))
    direct = timed(vol, False)
    if K > 1:
        remote = jnp.sum(vol[:, 1:], axis=1)
        hier_vol = vol.at[:, 0].add(remote)
        hier = timed(hier_vol, True)
    else:
        hier = direct
    return probs[DIRECT] * direct + probs[HIER] * hier + (probs[RING] + probs[TREE]) * direct + net.setup_s
