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
  tree      all-reduce 2 S / B_min + 2 log2(n) alpha_max  (double binary tree, pipelined)
  direct    every chip talks to every peer at once: the bytes to peers at level l go at B_l, links in
            parallel; latency alpha (1 + (n-1)/m) with m messages in flight (offload engines raise m)
  hierarchical  reduce-scatter inside the innermost level, the rest on S / fanout one level out,
            all-gather back; all-to-all: exchange inside the domain first, then one aggregated
            message per remote domain (more scale-up bytes, far fewer scale-out messages)

Reductions (all-reduce, reduce-scatter) also need (n-1)/n S bytes reduced per chip: on offload
engines at their aggregate throughput, overlapped with the transfer; on cores, at HBM speed.
All-to-all takes uneven per-device volumes: the slowest device sets the time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import jax.numpy as jnp

from ..hardware import System, level_latency_s, link_bandwidths, link_efficiencies

RING, DIRECT, TREE, HIER = range(4)


@dataclass(frozen=True)
class Net:
    """Per-level view of the network for one evaluation (python lists of static ints and arrays)."""

    fanout: tuple[int, ...]
    size: tuple[int, ...]
    link: tuple[str, ...]
    bw: list                  # per-chip bytes/s at each level (oversubscription applied)
    link_bw: dict             # per-chip bytes/s of each link
    oversub: list
    alpha: list               # seconds per algorithm step at each level
    msgs: object              # messages in flight
    offload: object           # share of collectives on offload engines, in [0, 1]
    engine_Bps: object        # aggregate reduction throughput of the engines
    setup_s: object           # per-collective fixed cost (engine setup or kernel launch)
    hbm_Bps: object


def make_net(system: System, offload) -> Net:
    up, out = link_bandwidths(system)
    e_up, e_out = link_efficiencies(system)
    links = {"scale_up": up * e_up, "scale_out": out * e_out}
    fan, size, link, bw, over, alpha = [], [], [], [], [], []
    prev = 1
    for lv in system.levels:
        fan.append(lv.size // prev)
        size.append(lv.size)
        prev = lv.size
        link.append(lv.link)
        bw.append(links[lv.link] / lv.oversubscription)
        over.append(lv.oversubscription)
        alpha.append(level_latency_s(system, lv))
    off, chip = system.offload, system.chip
    o = offload * (off.engines > 0)          # no engines: collectives run on the cores
    msgs = o * off.engines * off.msgs_per_engine + (1.0 - o) * chip.core_msgs_in_flight
    engine_Bps = off.engines * off.clock_Hz * off.reduce_bytes_per_cycle_all_busy
    setup = o * off.setup_s + (1.0 - o) * chip.launch_s
    return Net(tuple(fan), tuple(size), tuple(link), bw, links, over, alpha, msgs, o,
               engine_Bps, setup, chip.hbm_Bps * chip.hbm_eff)


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


def _ring(net: Net, S, lo: int, hi: int, passes: int):
    """Transfer + latency of `passes` ring passes (2: all-reduce, 1: reduce-scatter / all-gather)
    over levels lo..hi (see the module docstring). One level: passes ((n-1)/n S / B + (n-1) alpha)."""
    n = math.prod(net.fanout[lo:hi + 1])
    inner = math.prod(net.fanout[:lo])
    per_link, lat = {}, 0.0
    below = 1                                            # group members per level-(l-1) domain
    for l in range(lo, hi + 1):
        size = n if l == hi else net.size[l] // inner
        edges = (n // below if n // below > 1 else 0) - (n // size if n // size > 1 else 0)
        hops = edges - 1 if l == hi else edges
        below = size
        per_link[net.link[l]] = per_link.get(net.link[l], 0.0) + passes * (n - 1) / n * S * edges / n * net.oversub[l]
        lat = lat + passes * hops * net.alpha[l]
    return _max_links(net, per_link) + lat


def _max_links(net: Net, per_link_bytes: dict):
    times = [b / net.link_bw[k] for k, b in per_link_bytes.items()]
    out = times[0]
    for t in times[1:]:
        out = jnp.maximum(out, t)
    return out


def _reduce(net: Net, t_net, reduced_bytes):
    """Overlap the transfer with the reduction: engines at their throughput, cores at HBM speed."""
    eng = reduced_bytes / jnp.maximum(net.engine_Bps, 1.0)
    core = 3.0 * reduced_bytes / net.hbm_Bps       # read two operands, write one
    return net.offload * jnp.maximum(t_net, eng) + (1.0 - net.offload) * jnp.maximum(t_net, core)


def _rs_or_ag(net: Net, S, lo: int, hi: int, algo: int, reduce: bool):
    n, bw, alpha = _span(net, lo, hi)
    if n == 1:
        return jnp.zeros_like(jnp.asarray(S, jnp.float32))
    frac = (n - 1) / n
    if algo == HIER and hi > lo:
        inner = _rs_or_ag(net, S, lo, lo, RING, reduce)
        rest = _rs_or_ag(net, S / net.fanout[lo], lo + 1, hi, HIER, reduce)
        return inner + rest
    if algo == DIRECT:
        t = _direct_bytes_time(net, S, lo, hi) + alpha * (1.0 + (n - 1) / net.msgs)
    else:  # ring (tree has no reduce-scatter/all-gather form; it falls back to ring)
        t = _ring(net, S, lo, hi, 1)
    return _reduce(net, t, frac * S) if reduce else t


def reduce_scatter(net: Net, S, lo: int, hi: int, probs):
    return sum(probs[a] * _rs_or_ag(net, S, lo, hi, a, True) for a in range(4)) + net.setup_s * _nonempty(net, lo, hi)


def all_gather(net: Net, S, lo: int, hi: int, probs):
    return sum(probs[a] * _rs_or_ag(net, S, lo, hi, a, False) for a in range(4)) + net.setup_s * _nonempty(net, lo, hi)


def _nonempty(net: Net, lo: int, hi: int) -> float:
    return 1.0 if hi >= lo and math.prod(net.fanout[lo:hi + 1]) > 1 else 0.0


def _all_reduce(net: Net, S, lo: int, hi: int, algo: int):
    n, bw, alpha = _span(net, lo, hi)
    if n == 1:
        return jnp.zeros_like(jnp.asarray(S, jnp.float32))
    frac = (n - 1) / n
    if algo == RING:
        return _reduce(net, _ring(net, S, lo, hi, 2), frac * S)
    if algo == TREE:
        return _reduce(net, 2 * S / bw + 2 * math.ceil(math.log2(n)) * alpha, frac * S)
    if algo == DIRECT:
        return _rs_or_ag(net, S, lo, hi, DIRECT, True) + _rs_or_ag(net, S, lo, hi, DIRECT, False)
    if hi == lo:
        return _all_reduce(net, S, lo, hi, RING)
    inner_rs = _rs_or_ag(net, S, lo, lo, RING, True)
    rest = _all_reduce(net, S / net.fanout[lo], lo + 1, hi, HIER)
    inner_ag = _rs_or_ag(net, S, lo, lo, RING, False)
    return inner_rs + rest + inner_ag


def all_reduce(net: Net, S, lo: int, hi: int, probs):
    return sum(probs[a] * _all_reduce(net, S, lo, hi, a) for a in range(4)) + net.setup_s * _nonempty(net, lo, hi)


def all_to_all(net: Net, send, recv, probs, temperature_max):
    """Uneven all-to-all over all levels. send/recv: [D, K] bytes per device to/from peers first
    reached at level l. probs over ALGORITHMS (direct and hierarchical are the all-to-all forms).

    Direct: t = max_d max_link sum_{l on link} max(send_dl, recv_dl) o_l / B_link
                + sum_l alpha_l (1 + (peers_l - 1) / m)
    Hierarchical: traffic for remote domains crosses the scale-up level first (added to level 0),
    and each chip sends one aggregated message per remote domain: peers_l / fanout_0.
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
        lat = 0.0
        below = 1
        for l in range(K):
            peers = net.size[l] - below
            below = net.size[l]
            if peers <= 0:
                continue
            if hier and l > 0:
                peers = max(peers // net.fanout[0], 1)
            lat = lat + net.alpha[l] * (1.0 + (peers - 1) / net.msgs)
        return t + lat
    direct = timed(vol, False)
    if K > 1:
        remote = jnp.sum(vol[:, 1:], axis=1)
        hier_vol = vol.at[:, 0].add(remote)
        hier = timed(hier_vol, True)
    else:
        hier = direct
    return probs[DIRECT] * direct + probs[HIER] * hier + (probs[RING] + probs[TREE]) * direct + net.setup_s
