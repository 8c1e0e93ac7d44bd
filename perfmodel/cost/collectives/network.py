"""The network as one evaluation's collectives see it: per level, its fan-out, link, bandwidth and
per-step latency; who drives the collectives (offload engines or the cores) and, for the cores,
NCCL's protocol constants (nccl.py) with the chip's own figures.

A level l joins fanout_l sub-domains; its per-chip bandwidth is B_l = B_link x efficiency /
oversubscription_l (efficiency: the achievable share of the line rate, hardware.link_efficiencies)
and its per-step latency alpha_l (hardware.level_latency_s, the LL protocol's for the cores).

A partial system (its last domain holds fewer chips: hardware.System.partial) has the shape of the
smallest full system holding it (hardware.padded_sizes) and `crowding`: the collectives'
coefficients of each level scaled by how much more of a level's traffic its busiest chip carries
than on the full shape (partial_crowding).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ...hardware import (System, level_latency_s, link_bandwidths, link_efficiencies, padded_sizes, peers_per_level,
                         present_in_domains)
from ..arrays import lead, xp_of
from . import nccl

KINDS = ("nvlink", "pcie", "net")
LINKS = ("scale_up", "scale_out")


class Terms(NamedTuple):
    """The traced network terms every collective of a Net uses: inverse bandwidth per level [K],
    alpha features [F] (each level's alpha, then the largest alpha of each span of levels), (1, 1/m)
    for m messages in flight, each link kind's extra latency per step under each protocol
    [KINDS, P], the protocols' base latency [P] and bandwidth share [P]. In numpy (a batch of plans:
    cost.arrays) (1, 1/m) is [N, 2], the rest the same."""

    inv_bw: object
    feats: object
    per_msg: object
    step: object
    base: object
    share: object


@dataclass(frozen=True)
class Net:
    """Per-level view of the network for one evaluation (python tuples of static structure, arrays)."""

    fanout: tuple[int, ...]
    size: tuple[int, ...]
    link: tuple[str, ...]
    kind: tuple[str, ...]      # per level: "nvlink" / "pcie" (a dedicated scale-up link) or "net" (a NIC)
    reduces: tuple[bool, ...]  # per level: its switches reduce (NVLS on scale-up, SHARP on scale-out)
    bw: list                   # per-chip bytes/s at each level (oversubscription applied)
    link_bw: dict              # per-chip achievable bytes/s of each link
    oversub: list
    alpha: list                # seconds per algorithm step at each level (LL protocol for cores)
    msgs: object               # messages in flight
    offload: object            # share of collectives on offload engines, in [0, 1]
    engine_Bps: object         # aggregate reduction throughput of the engines
    setup_s: object            # per-collective fixed cost (engine setup, or a core-driven call)
    hbm_Bps: object
    channels: object           # NCCL channels of a core-driven collective
    ll_max_Bps: object         # LL's bus-bandwidth cap on one node
    nvls_Bps: object           # per-chip NVLS rate on the scale-up link
    nvls_channels: object      # NVLS's channels
    innet_latency_s: object    # an in-network (SHARP) all-reduce's latency
    terms: Terms
    proto_base: tuple = nccl.PROTOCOL_BASE_S
    proto_step: dict = None
    proto_share: tuple = nccl.PROTOCOL_SHARE
    nvls_latency_s: object = nccl.NVLS_LATENCY_S
    crowding: tuple = None     # partial systems: (per level through one chip per domain, direct), partial_crowding

    def retuned(self, **changes) -> "Net":
        """This Net with some latencies, bandwidths or protocol figures changed, its terms recomputed
        (validation's calibration scales them)."""
        new = dataclasses.replace(self, **changes)
        return dataclasses.replace(new, terms=_terms(new))


def f32(x):
    return xp_of(x).asarray(x, np.float32)


def spans(K: int) -> list:
    return [(i, j) for i in range(K) for j in range(i + 1, K)]


def _terms(net: Net) -> Terms:
    xp = xp_of(net.msgs, *net.alpha, *net.bw)
    K = len(net.fanout)
    alpha = [f32(a) for a in net.alpha]
    feats = list(alpha)
    for i, j in spans(K):
        top = alpha[i]
        for l in range(i + 1, j + 1):
            top = xp.maximum(top, alpha[l])
        feats.append(top)
    inv_m = 1.0 / f32(net.msgs)
    ones = xp.ones_like(inv_m) if np.ndim(inv_m) else xp.ones(())
    return Terms(1.0 / xp.stack([f32(b) for b in net.bw]), xp.stack(feats), xp.stack([ones, inv_m], axis=-1),
                 xp.stack([xp.stack([f32(x) for x in net.proto_step[k]]) for k in KINDS]),
                 xp.stack([f32(b) for b in net.proto_base]), xp.stack([f32(e) for e in net.proto_share]))


def _kind(system: System, level) -> str:
    if level.link == "scale_out" or system.nic.serves_scale_up:
        return "net"
    return system.chip.scale_up_kind


def make_net(system: System, offload) -> Net:
    up, out = link_bandwidths(system)
    e_up, e_out = link_efficiencies(system)
    links = {"scale_up": up * e_up, "scale_out": out * e_out}
    fan, size, link, kind, reduces, bw, over, alpha = [], [], [], [], [], [], [], []
    prev = 1
    for lv, full in zip(system.levels, padded_sizes(system)):
        fan.append(full // prev)
        size.append(full)
        prev = full
        link.append(lv.link)
        kind.append(_kind(system, lv))
        reduces.append(bool(lv.switch_reduction))
        b, a = links[lv.link] / lv.oversubscription, level_latency_s(system, lv)
        if kind[-1] == "net":
            b, a = chunked(b, a, system.nic, system.chip.core_channels)
        bw.append(b)
        over.append(lv.oversubscription)
        alpha.append(a)
    off, chip, nic = system.offload, system.chip, system.nic
    o = offload * (off.engines > 0)          # no engines: collectives run on the cores
    msgs = o * off.engines * off.msgs_per_engine + (1.0 - o) * chip.core_msgs_in_flight
    engine_Bps = off.engines * off.clock_Hz * off.reduce_bytes_per_cycle_all_busy
    setup = o * off.setup_s + (1.0 - o) * chip.core_call_s
    over0 = system.levels[0].oversubscription if system.levels else 1.0
    steps = dict(nccl.PROTOCOL_STEP_S)
    # Simple waits for the NIC once more per network step (tuning.cc: "flush extra latency")
    steps["net"] = steps["net"][:2] + (steps["net"][2] + nic.latency_s,)
    net = Net(tuple(fan), tuple(size), tuple(link), tuple(kind), tuple(reduces), bw, links, over, alpha,
              msgs, o, engine_Bps, setup, chip.hbm_Bps * chip.hbm_eff, channels=chip.core_channels,
              ll_max_Bps=chip.ll_max_Bps, nvls_Bps=up * chip.nvls_eff / over0, nvls_channels=chip.nvls_channels,
              innet_latency_s=nccl.INNET_LATENCY_S + 2.0 * nic.latency_s, terms=None, proto_step=steps,
              crowding=partial_crowding(system) if system.partial else None)
    return dataclasses.replace(net, terms=_terms(net))


def chunked(bw, alpha, nic, channels):
    """A network level's per-chip bandwidth and per-step latency with the network stack's cost per
    chunk (nic.chunk_s: NCCL's net proxy over IB / RoCE, aws-ofi-nccl over EFA, the TCPXO plugin).

    A channel sends a step's b bytes in n = max(1, b / chunk) chunks, and its proxy posts and
    completes each one for c seconds that the wire does not hide (NVIDIA/nccl issue 2409: on a
    400 Gb/s RoCE link 128 KiB chunks reach 13 GB/s, 1 MiB chunks 87.6 GB/s: the per-chunk cost,
    not the link, sets the rate). Smoothly, a step of b bytes on one channel of rate B_ch takes

        t(b) = c (1 + b / chunk) + b / B_ch

    (the first chunk's cost, then one per chunk's worth of bytes): the step's latency grows by c
    and each channel's bytes pay c / chunk per byte, so with `channels` channels sharing the NIC
    the chip's inverse bandwidth grows by c / (chunk x channels). A step of n full chunks on one
    channel therefore takes c (1 + n) + n chunk / B_ch. A level no NIC carries is unchanged."""
    return 1.0 / (1.0 / bw + nic.chunk_s / (nic.chunk_bytes * channels)), alpha + nic.chunk_s


def partial_crowding(system: System) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """How much more of each level's traffic the busiest chip of a partial system carries than a
    chip of the full shape (padded_sizes) the algorithms' coefficients describe, per level:

    through  algorithms that leave a domain through one chip at a time, the crossings spread over
             the domain's members (a ring's edge between domains, a tree's link up, a hierarchical
             form's stage across domains on the chip's 1/L share): a domain of L' < L chips sends
             and receives what a full one does over L' chips' links, so level l's bytes per chip
             are L_(l-1) / L'_(l-1) times the full shape's (the fewest chips among level-(l-1)
             domains that have a sibling); the inner levels run at the full domain's size, and a
             partial domain's own inner stage, on fewer chips, is never the slower one
    direct   a direct transfer over the whole system sends S / n to each peer: the busiest chip's
             bytes at level l are max_d peers_l(d) / n, against the full shape's
             (P_l - P_(l-1)) / N (N = P_top chips); a device of the partial domain has fewer
             peers inside it and more beyond
    Latencies keep the full shape's step counts: the busiest device of a partial system has as
    many peers beyond its domain ((H - 1) L, as on the full shape), and a ring's n - 1 hops are
    counted as N - 1 (an overestimate by (N - n) / (n - 1) of its latency term).
    """
    present = present_in_domains(system)
    sizes = [lv.size for lv in system.levels]
    through = [1.0]
    for l in range(1, len(sizes)):
        starts = np.arange(0, system.num_chips, sizes[l - 1])          # one device per level-(l-1) domain
        own = present[starts, l - 1]
        siblings = present[starts, l] > own                            # the level-l domain holds more
        fewest = own[siblings].min() if siblings.any() else sizes[l - 1]
        through.append(float(sizes[l - 1] / fewest))
    n, full = system.num_chips, padded_sizes(system)
    N = full[-1]
    peers = peers_per_level(system).max(axis=0)
    padded = np.diff([1] + list(full))
    direct = tuple(float((p / n) / (q / N)) if q else 1.0 for p, q in zip(peers, padded))
    return tuple(through), direct


def shape(net: Net):
    """The network's static shape, which the algorithms' coefficients depend on."""
    return net.fanout, net.size, net.link, net.kind, net.reduces


def against(per_plan, static, own: int):
    """A per-plan array ([..., *own axes]) against static coefficients with more leading axes: in
    numpy (a batch [N, ...]) singleton axes inserted after the batch axis; as it is otherwise."""
    if not isinstance(per_plan, np.ndarray) or per_plan.ndim == own:
        return per_plan
    extra = np.ndim(static) - own
    return per_plan.reshape(per_plan.shape[:per_plan.ndim - own] + (1,) * extra + per_plan.shape[per_plan.ndim - own:])


def latency(net: Net, H):
    """Latency of static coefficients H [..., 2, F]: sum_f (H0 + H1 / m) a_f."""
    t = net.terms
    H = np.asarray(H, np.float32)
    return xp_of(t.per_msg, t.feats).sum(H * against(t.per_msg[..., :, None] * t.feats, H, 2), axis=(-2, -1))


def per_protocol(net: Net, lat, steps, live):
    """Latency [..., P] under each core-driven protocol: `lat` plus the protocol's extra latency per
    step (steps [..., 2, KINDS], per step and per step per message in flight) and its base latency
    where `live` (1 for a real transfer, 0 for padding)."""
    t = net.terms
    xp = xp_of(t.per_msg, t.step, lat)
    steps = np.asarray(steps, np.float32)
    # steps + steps per message / m, per link kind: the per-message column alone is per plan
    fixed, per_msg = steps[..., 0, :], steps[..., 1, :]
    per_kind = fixed + per_msg * against(t.per_msg[..., 1:], per_msg, 1) if per_msg.any() else fixed   # [..., KINDS]
    extra = xp.sum(per_kind[..., None] * t.step, axis=-2)                                 # [..., P]
    return lat[..., None] + extra + np.asarray(live, np.float32)[..., None] * t.base


def blend(net: Net, eng, core):
    """Engines' and cores' times weighted by the share of collectives on the engines."""
    o = lead(net.offload, eng)
    return o * eng + (1.0 - o) * core

