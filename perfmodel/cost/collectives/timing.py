"""Collective times: the algorithms' coefficients (algorithms/) combined with one evaluation's
bandwidths and latencies (network.py), for every algorithm, component and protocol at once in a few
array operations (products and sums, never einsum or @: a matrix product in the program makes
XLA:CPU call oneDNN, which builds its kernels at the program's first call; embedding._over_tables).

Who drives the collective (Net.offload, in [0, 1], blends the two):
  engines   (offload engines, e.g. MTIA 300's message engines) the algorithms as they stand:
            transfer + per-step latency, reductions at the engines' throughput.
  cores     (NCCL-like kernels, every chip with no engines) each transfer runs with one of NCCL's
            protocols p in {LL, LL128, Simple} and the fastest is taken (nccl.py):
              t_p = base_p + sum_steps (alpha_l + step_p[link kind of l])
                    + max(bytes-time / share_p, LL: bus bytes / llMaxBw) x channels / nc_p(S)
            with nc_p(S) NCCL's channels for S bytes; NVLS and in-network (SHARP) all-reduces where
            the switches reduce. The min is exact (hard): continuous and monotone in every input,
            gradients those of the fastest protocol, and the same in the hard and the relaxed
            evaluation.

Reductions (all-reduce, reduce-scatter) also need (n-1)/n S bytes reduced per chip: on offload
engines at their aggregate throughput, overlapped with the transfer; on cores, at HBM speed.
All-to-all takes uneven per-device volumes: the slowest device sets the time.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ..arrays import xp_of
from ..smooth import hard_max, hard_min
from . import nccl
from .algorithms import HIER, REGISTRY, RING, TREE, a2a_c, table
from .algorithms.ring import ring_c
from .network import KINDS, LINKS, Net, f32, blend, latency, per_protocol, shape

# a protocol a transfer cannot use costs this much (an in-network reduction runs Simple only)
UNAVAILABLE_S = 1.0


class Parts(NamedTuple):
    """One transfer: its bytes at the links' full rate, its per-step latency at the presets' alpha,
    and how many steps it makes on each link kind (for the protocols' extra latency)."""

    bytes_s: object
    lat_s: object
    steps: dict


def protocol_times(net: Net, p: Parts) -> list:
    """Core-driven time of the transfer under each of NCCL's protocols, all channels running."""
    out = []
    for i in range(len(nccl.PROTOCOLS)):
        extra = 0.0
        for k, c in p.steps.items():
            extra = extra + c * net.proto_step[k][i]
        out.append(net.proto_base[i] + p.lat_s + extra + p.bytes_s / net.proto_share[i])
    return out


def _core_parts(net: Net, tab):
    """Per algorithm and component ([A, C]): the cores' bytes coefficient per protocol, latency per
    protocol ([A, C, P]), LL's bus-bytes coefficient over its cap, and each protocol's channel
    threshold over S ([A, C, P])."""
    t = net.terms
    xp = xp_of(t.inv_bw)
    slowest = hard_max(xp.sum(tab["core_bytes"] * t.inv_bw, axis=-1), -1)            # [A, C]
    lat = per_protocol(net, latency(net, tab["core_lat"]), tab["steps"], tab["live"])
    innet = tab["innet"][..., None]
    simple_only = np.asarray([UNAVAILABLE_S, UNAVAILABLE_S, 0.0], np.float32)
    lat = (1.0 - innet) * lat + innet * (simple_only + net.innet_latency_s)
    one_node = (tab["nodes"] <= 1).astype(np.float32)
    multi = np.asarray([nccl.ll_cap_Bps(1.0, int(n)) if n > 1 else 1.0 for n in tab["nodes"].ravel()],
                       np.float32).reshape(tab["nodes"].shape)
    ll_bus = tab["bus"] * (one_node / net.ll_max_Bps + (1.0 - one_node) / multi)       # [A, C]
    thr = np.asarray(nccl.CHANNEL_THRESHOLD_BYTES, np.float32)
    ranks = np.where(tab["ranks"] > 0, tab["ranks"], 1.0)[..., None]
    per_ch = thr * np.concatenate([ranks, np.ones_like(ranks), np.ones_like(ranks)], axis=-1)
    over_S = per_ch / np.maximum(tab["scale"], 1e-30)[..., None] * (1.0 - innet)   # bytes of S a channel needs
    return slowest, lat, ll_bus, over_S


def _algorithm_times(net: Net, op: str, S, lo: int, hi: int):
    """(engines, cores), each [..., ALGORITHMS]: every algorithm's time for S bytes per chip
    (S of any shape); the cores take each transfer's fastest protocol, an exact min. A pipelined
    algorithm (algorithms.table) is one transfer: its components' link loads add."""
    S = f32(S)
    xp = xp_of(S, net.msgs, net.engine_Bps)
    if xp is np and np.ndim(net.msgs):      # a batch of plans: S per plan, [N] (cost.arrays)
        S = np.broadcast_to(S, np.broadcast_shapes(S.shape, np.shape(net.msgs)))
    tab = table(shape(net), op, lo, hi)
    if tab is None:
        z = xp.zeros(S.shape + (len(REGISTRY),), np.float32)
        return z, z
    if net.crowding is not None:
        tab = _crowded(net, tab, lo, hi)
    t = net.terms
    inv_bw = t.inv_bw
    slowest = lambda C: hard_max(xp_of(inv_bw).sum(C * inv_bw, axis=-1), -1)
    pipe = tab["pipelined"]                                  # [A]
    s = S[..., None, None]                                   # against [A, C]
    s1 = S[..., None]                                        # against [A]
    reduced = tab["reduced"]

    # engines: the transfer, or the reduction at the engines' throughput, whichever is slower; their
    # hierarchical forms pipelined
    eng_rate = xp.maximum(net.engine_Bps, 1.0)
    eng_l = latency(net, tab["eng_lat"])
    eng_c = xp.sum(xp.maximum(eng_l + s * slowest(tab["eng_bytes"]), s * reduced / eng_rate), axis=-1)
    eng = eng_c
    if pipe.any():        # (the pipelined form is priced only where an algorithm runs it)
        eng_p = xp.maximum(xp.sum(eng_l, axis=-1) + s1 * slowest(tab["eng_bytes"].sum(1)), s1 * reduced.sum(1) / eng_rate)
        eng = pipe * eng_p + (1.0 - pipe) * eng_c

    # cores: NCCL's protocols, LL's cap, the channels S gets (nccl.py)
    comp_slow, core_l, ll_bus, over_S = _core_parts(net, tab)
    ch = net.channels

    def timed(lat, bytes_s, bus_s, per_ch, slower=1.0):   # [..., X, P] latencies; [..., X] bytes and bus times
        bw = bytes_s[..., None] / t.share * slower
        bw = xp.concatenate([xp.maximum(bw[..., :1], bus_s[..., None]), bw[..., 1:]], axis=-1)    # LL's cap
        per = np.where(per_ch > 0, per_ch, 1.0).astype(np.float32)       # (0: no reduction by size)
        nc = xp.minimum(1.0, xp.maximum(1.0 / ch, S.reshape(S.shape + (1,) * per_ch.ndim) / (ch * per)))
        if not (per_ch > 0).all():
            nc = xp.where(per_ch > 0, nc, 1.0)
        return hard_min(lat + bw / nc, -1)

    hbm = lambda x: x * 3.0 / net.hbm_Bps                   # a reduction reads two operands, writes one
    slower = _all_reduce_share(xp, tab, S) if op == "all_reduce" else 1.0
    core_c = xp.sum(xp.maximum(timed(core_l, s * comp_slow, s * ll_bus, over_S, slower), hbm(s * reduced)), axis=-1)
    # NCCL runs a hierarchical form as its calls one after the other, or pipelined where it has the
    # algorithm: CollNet, where the outer level reduces in its switches
    innet = tab["innet"].max(axis=1)                                          # [A]
    core = core_c
    if innet.any():
        live = tab["live"][..., None]
        per_pipe = np.max(np.where(live > 0, over_S * np.maximum(tab["scale"], 1e-30)[..., None], 0.0), axis=1)   # [A, P]
        core_p = xp.maximum(timed(xp.sum(core_l * live, axis=-2), s1 * slowest(tab["core_bytes"].sum(1)),
                                  s1 * ll_bus.sum(1), per_pipe), hbm(s1 * reduced.sum(1)))
        core = innet * xp.minimum(core_p, core_c) + (1.0 - innet) * core_c
    for a, algo in enumerate(REGISTRY):
        if op == "all_reduce" and algo.nvls and NVLS[algo.nvls][0](net, lo, hi):
            core = _with(xp, core, a, xp.minimum(core[..., a], NVLS[algo.nvls][1](net, tab, S)))
    return eng, core


def _all_reduce_share(xp, tab: dict, S):
    """[..., ALGORITHMS, C, P]: how much slower than the ring's each algorithm's core-driven
    all-reduce moves its bytes under each protocol (Algorithm.core_share; NCCL's tree: its own
    share of the bus bandwidth, and with Simple only part of that at mid sizes), 1 where the
    algorithm keeps the ring's."""
    P = len(nccl.PROTOCOLS)
    share = np.ones((len(REGISTRY),) + tab["nodes"].shape[1:] + (P,), np.float32)
    below = []
    for a, algo in enumerate(REGISTRY):
        if algo.core_share is not None:
            share[a] = algo.core_share(tab["nodes"][a])
        if algo.simple_share is not None:
            on = np.zeros((len(REGISTRY), 1, P), np.float32)
            on[a, 0, nccl.PROTOCOLS.index("Simple")] = 1.0
            below.append(on * (1.0 / algo.simple_share(xp, S)[..., None, None, None] - 1.0))
    return share * (1.0 + sum(below[1:], below[0])) if below else share


def _crowded(net: Net, tab: dict, lo: int, hi: int) -> dict:
    """A partial system's coefficients (network.partial_crowding): each level's bytes scaled by what
    its busiest chip carries more than on the full shape, as each algorithm's transfers cross it
    (Algorithm.crowding)."""
    through, direct = net.crowding
    whole = lo == 0 and hi == len(net.fanout) - 1
    per_algo, engines = (np.asarray(x, np.float32) for x in zip(*(a.crowding(through, direct, whole) for a in REGISTRY)))
    return {**tab, "core_bytes": tab["core_bytes"] * per_algo[:, None, None, :],
            "eng_bytes": tab["eng_bytes"] * engines[:, None, None, :]}


def _with(xp, times, a: int, value):
    """times [..., ALGORITHMS] with algorithm a's replaced by value [...]."""
    return xp.concatenate([times[..., :a], value[..., None], times[..., a + 1:]], axis=-1)


def _nvls_tree(net: Net, tab, S):
    """NCCL's NVLSTree: NVLS inside the innermost domain, a tree across the domains (the tree
    algorithm's outer part as tree.tree_c prices it: 2 S / m a chip, S / m between two domains,
    whose two trees run opposite ways), the two pipelined, Simple protocol. A domain's NICs bound
    it: between two domains each sends S, at least what the other needs to complete its sums."""
    xp = xp_of(S, net.nvls_Bps)
    t = net.terms
    inner_level = np.zeros(tab["core_lat"].shape[-1], np.float32)
    inner_level[0] = 1.0
    H = tab["core_lat"][TREE, 0] * (1.0 - inner_level)                      # the tree's latency across domains
    steps = tab["steps"][TREE, 0].copy()
    steps[:, KINDS.index(net.kind[0])] = 0.0
    lat = per_protocol(net, latency(net, H), steps, np.float32(1.0))[..., 2]
    C = tab["core_bytes"][TREE, 0].copy()
    C[:, 0] = 0.0
    out_b = S * hard_max(xp_of(t.inv_bw).sum(C * t.inv_bw, axis=-1), -1)
    return lat + xp.maximum(out_b, _nvls(net, S) - net.nvls_latency_s) + net.nvls_latency_s


# The NVLS forms an Algorithm may name (Algorithm.nvls): where NCCL swaps one in for a core-driven
# all-reduce over levels lo..hi (the faster of the two runs), and its time
NVLS = {"nvls": (lambda net, lo, hi: has_nvls(net, lo, hi), lambda net, tab, S: _nvls(net, S)),
        "nvls_tree": (lambda net, lo, hi: has_nvls(net, lo, lo) and hi > lo, lambda net, tab, S: _nvls_tree(net, tab, S))}


def _nonempty(net: Net, lo: int, hi: int) -> float:
    return 1.0 if hi >= lo and math.prod(net.fanout[lo:hi + 1]) > 1 else 0.0


def _collective(net: Net, op: str, S, lo: int, hi: int, probs):
    """The algorithms' times weighted by `probs` (one-hot, or relaxed), plus the fixed setup."""
    eng, core = _algorithm_times(net, op, S, lo, hi)
    return xp_of(eng, probs).sum(blend(net, eng, core) * probs, axis=-1) + net.setup_s * _nonempty(net, lo, hi)


def reduce_scatter(net: Net, S, lo: int, hi: int, probs):
    return _collective(net, "reduce_scatter", S, lo, hi, probs)


def all_gather(net: Net, S, lo: int, hi: int, probs):
    return _collective(net, "all_gather", S, lo, hi, probs)


def all_reduce(net: Net, S, lo: int, hi: int, probs):
    return _collective(net, "all_reduce", S, lo, hi, probs)


def has_nvls(net: Net, lo: int, hi: int) -> bool:
    """NVLS serves a group inside one scale-up domain whose switch reduces."""
    return lo == hi == 0 and net.reduces[0] and net.link[0] == "scale_up" and net.fanout[0] > 1


def _nvls(net: Net, S):
    """Core-driven NVLS all-reduce (nccl.py): S (n+1)/n each way at the NVLS rate, Simple protocol,
    with its pipeline's fill: NVLS_PIPELINE_CHUNKS of NCCL's chunk for S on each channel."""
    n = net.fanout[0]
    xp = xp_of(S, net.nvls_Bps)
    per_channel = net.nvls_Bps * n / (n + 1) / net.nvls_channels           # algorithm bytes/s of a channel
    chunk = xp.minimum(nccl.nvls_chunk_bytes(xp, S, n), S / net.nvls_channels)     # no chunk exceeds the data
    fill = nccl.NVLS_PIPELINE_CHUNKS * chunk / per_channel
    return S * (n + 1) / n / net.nvls_Bps + fill + net.nvls_latency_s


def nvls_all_reduce(net: Net, S, lo: int, hi: int):
    """NVLS all-reduce, core-driven (nccl.py); only where has_nvls(net, lo, hi)."""
    if not has_nvls(net, lo, hi):
        raise ValueError("NVLS needs a group inside one scale-up domain whose switch reduces "
                         "(network level switch_reduction = true)")
    return _nvls(net, f32(S)) + net.setup_s


def nccl_all_reduce(net: Net, S, lo: int, hi: int):
    """NCCL's own choice for a core-driven all-reduce: the fastest of its algorithms the model has
    (ring, tree, NVLS where the scale-up switch reduces, the hierarchical form with the reduction in
    the network where the scale-out switches reduce), each with its fastest protocol."""
    if math.prod(net.fanout[lo:hi + 1]) == 1:
        return jnp.zeros_like(f32(S))
    _, core = _algorithm_times(net, "all_reduce", S, lo, hi)
    t = jnp.minimum(core[..., RING], core[..., TREE])
    if has_nvls(net, lo, hi):
        t = jnp.minimum(t, _nvls(net, f32(S)))
    if hi > lo and (any(net.reduces[lo + 1:hi + 1]) or has_nvls(net, lo, lo)):     # CollNet, NVLSTree
        t = jnp.minimum(t, core[..., HIER])
    return t + net.setup_s


def ring_parts(net: Net, S, lo: int, hi: int, passes: int) -> Parts:
    """The ring's transfer as Parts (bytes time, latency, steps per link kind), e.g. for
    protocol_times."""
    c = ring_c(shape(net), lo, hi, passes, 1.0, False)
    per_link = jnp.sum(jnp.asarray(c.core_bytes, jnp.float32) * net.terms.inv_bw, axis=-1)
    return Parts(f32(S) * hard_max(jnp.ravel(per_link), 0), latency(net, c.core_lat),
                 {k: float(c.steps[0, i]) for i, k in enumerate(KINDS) if c.steps[0, i]})


def all_to_all_fixed(net: Net, hier: bool) -> Parts:
    """The all-to-all's per-step latency and steps per link kind (its transfer left at 0): direct,
    or hierarchical (one aggregated message per remote domain)."""
    c = a2a_c(shape(net), hier)
    per_msg = net.terms.per_msg
    steps = {k: jnp.sum(per_msg * jnp.asarray(c.steps[:, i], jnp.float32)) for i, k in enumerate(KINDS) if c.steps[:, i].any()}
    return Parts(0.0, latency(net, c.core_lat), steps)


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
    t = net.terms
    on_link = [[l for l in range(K) if net.link[l] == k] for k in LINKS]
    on_link = [levels for levels in on_link if levels]

    def transfer(cols):         # the slowest device's busiest link; cols: [D] bytes per level
        # each link's levels summed in level order: a static selection, not a product with a 0/1
        # mask over [D, K, links], which costs the evaluation more than the rest of the collective
        per_link = [functools.reduce(lambda x, y: x + y, (cols[l] * t.inv_bw[l] for l in levels)) for levels in on_link]
        return temperature_max(hard_max(xp.stack(per_link, axis=-1), -1) if len(per_link) > 1 else per_link[0])

    vol = xp.maximum(send, recv)                      # [D, K]
    cols = [vol[..., l] for l in range(K)]
    forms = [transfer(cols)]
    if K > 1:       # hierarchical: the bytes for remote domains cross the scale-up level first
        forms.append(transfer([cols[0] + xp.sum(vol[..., 1:], axis=-1)] + cols[1:]))
    fixed = [a2a_c(shape(net), hier) for hier in (False, True)[:len(forms)]]
    tt = xp.stack(forms, axis=-1)
    lat = latency(net, np.stack([c.core_lat for c in fixed]))                          # [forms]
    core_lat = per_protocol(net, lat, np.stack([c.steps for c in fixed]), np.ones(len(fixed)))
    timed = blend(net, tt + lat, hard_min(core_lat + tt[..., None] / t.share, -1))
    forms = {"direct": timed[..., 0], "hierarchical": timed[..., -1]}
    # each algorithm's share runs the all-to-all form it names (Algorithm.all_to_all)
    weight = {}
    for a, algo in enumerate(REGISTRY):
        weight[algo.all_to_all] = weight[algo.all_to_all] + probs[..., a] if algo.all_to_all in weight else probs[..., a]
    terms = [weight[f] * forms[f] for f in forms if f in weight]
    return sum(terms[1:], terms[0]) + net.setup_s
