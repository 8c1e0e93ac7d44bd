"""Collective times against hand calculations from the preset numbers (NCCL's alpha + S / B model)."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cost import collectives as coll

S = 64e6  # bytes per chip
ONE = {a: jnp.asarray(np.eye(len(pm.ALGORITHMS), dtype=np.float32)[i]) for i, a in enumerate(pm.ALGORITHMS)}

# mtia300 preset: NIC of 10 active x 800 Gb/s ports, 80 % on scale-up; rack latency 1.5 us,
# cluster 2.0 us; NIC 1.0 us + 0.2 us per message; launch 3 us; 16 engines x 1.9 GHz x 96 B/cycle.
# The NIC reaches 97 % of its line rate (nic.bandwidth_efficiency, as a ConnectX-7's ~48.5 of 50
# GB/s): link_bandwidths gives line rates, the collectives run at line rate x 0.97.
LINE_UP, LINE_OUT = 0.8 * 10 * 100e9, 0.2 * 10 * 100e9
UP, OUT = 0.97 * LINE_UP, 0.97 * LINE_OUT
A_UP, A_OUT = 1.5e-6 + 1.2e-6, 2.0e-6 + 1.2e-6
LAUNCH, SETUP = 3e-6, 1e-6
ENGINE_BPS = 16 * 1.9e9 * 96


def test_link_bandwidths_and_latencies(mtia64, h100_64):
    up, out = pm.link_bandwidths(mtia64)
    assert float(up) == pytest.approx(LINE_UP, rel=1e-6) and float(out) == pytest.approx(LINE_OUT, rel=1e-6)
    net = coll.make_net(mtia64, 1.0)
    assert [float(a) for a in net.alpha] == pytest.approx([A_UP, A_OUT], rel=1e-6)
    assert [float(b) for b in net.bw] == pytest.approx([UP, OUT], rel=1e-6)
    assert net.fanout == (16, 4)
    # H100: NVLink 450 GB/s at 0.6 us; NIC 50 GB/s behind PCIe (63 GB/s): 2 + 1 + 1 + 1 us per step
    up, out = pm.link_bandwidths(h100_64)
    assert float(up) == pytest.approx(450e9, rel=1e-6) and float(out) == pytest.approx(50e9, rel=1e-6)
    net = coll.make_net(h100_64, 1.0)
    assert [float(a) for a in net.alpha] == pytest.approx([0.6e-6, 5.0e-6], rel=1e-6)
    # achievable: NCCL's ~370 of NVLink4's 450 GB/s (0.822); a ConnectX-7's ~48.5 of 50 GB/s (0.97)
    assert [float(b) for b in net.bw] == pytest.approx([0.822 * 450e9, 0.97 * 50e9], rel=1e-6)


def test_pcie_caps_an_integrated_nic_moved_behind_it(mtia64):
    nic = mtia64.nic
    behind = mtia64.replace(nic=type(nic)(**{**nic.__dict__, "pcie": jnp.float32(1.0)}))
    up, out = pm.link_bandwidths(behind)
    cap = 64e9 / (10 * 100e9)    # host PCIe Gen5 x16 64 GB/s over the NIC's 1 TB/s
    assert float(up) == pytest.approx(LINE_UP * cap, rel=1e-5)
    assert float(out) == pytest.approx(LINE_OUT * cap, rel=1e-5)


# NCCL's protocols for core-driven collectives (tuning.cc): base latency, extra per-step latency over
# LL's on a network link (MTIA's NICs carry scale-up), share of each line that is data
BASE = {"LL": 6.6e-6, "LL128": 14e-6, "Simple": 8.4e-6}
# Simple waits for the NIC (1 us on mtia300) once more per network step: tuning.cc's flush latency
NET_EXTRA = {"LL": 0.0, "LL128": 1.3e-6, "Simple": 11.3e-6 + 1.0e-6}
NVL_EXTRA = {"LL": 0.0, "LL128": 1.3e-6, "Simple": 2.8e-6}
EFF = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}


def test_ring_all_reduce_inside_a_rack(mtia16):
    n = 16
    core = coll.make_net(mtia16, 0.0)
    # on the cores: 30 steps, 2 x 15/16 x 64 MB; at this size LL128 is the fastest protocol
    proto = {p: BASE[p] + 2 * (n - 1) * (A_UP + NET_EXTRA[p]) + 2 * (n - 1) / n * S / (UP * EFF[p]) for p in BASE}
    assert min(proto, key=proto.get) == "LL128"
    expect = min(proto.values()) + LAUNCH
    assert float(coll.all_reduce(core, S, 0, 0, ONE["ring"])) == pytest.approx(expect, rel=1e-5)
    # on the engines: the reduction (15/16 S at 2.9 TB/s = 21 us) hides under the transfer
    eng = coll.make_net(mtia16, 1.0)
    expect_eng = 2 * (n - 1) / n * S / UP + 2 * (n - 1) * A_UP + SETUP
    assert float(coll.all_reduce(eng, S, 0, 0, ONE["ring"])) == pytest.approx(expect_eng, rel=1e-5)


def test_engine_reduction_bounds_a_fast_transfer(mtia16):
    """With one engine the reduce unit (128 B/cycle -> 96 busy) is slower than 800 GB/s links."""
    off = mtia16.offload
    one = mtia16.replace(offload=type(off)(**{**off.__dict__, "engines": jnp.float32(1.0)}))
    net = coll.make_net(one, 1.0)
    n = 16
    t_net = (n - 1) / n * S / UP + (n - 1) * A_UP
    t_red = (n - 1) / n * S / (1.9e9 * 96)
    got = float(coll.reduce_scatter(net, S, 0, 0, ONE["ring"]))
    assert t_red > t_net
    assert got == pytest.approx(t_red + SETUP, rel=1e-5)


def test_tree_direct_and_hierarchical_all_reduce(mtia64):
    net = coll.make_net(mtia64, 1.0)
    n = 64
    bmin, amax = OUT, A_OUT
    tree = 2 * S / bmin + 2 * math.ceil(math.log2(n)) * amax + SETUP
    assert float(coll.all_reduce(net, S, 0, 1, ONE["tree"])) == pytest.approx(tree, rel=1e-5)
    # ring over both levels (NCCL's multi-channel rings): of the ring's 64 edges, 60 stay inside a
    # rack and 4 cross racks, so a chip sends 60/64 of its 2 x 63/64 S over scale-up and 4/64 over
    # scale-out, both links at once; a chunk's 63 hops per pass: 60 in a rack, 3 between racks
    vol = 2 * (n - 1) / n * S
    ring = max(vol * 60 / 64 / UP, vol * 4 / 64 / OUT) + 2 * (60 * A_UP + 3 * A_OUT) + SETUP
    assert float(coll.all_reduce(net, S, 0, 1, ONE["ring"])) == pytest.approx(ring, rel=1e-5)
    # direct (two-shot): reduce-scatter + all-gather, each chip talks to 15 rack peers over scale-up
    # and 48 remote peers over scale-out at once; 64 messages in flight (16 engines x 4)
    m = 64
    bytes_t = max(S * 15 / 64 / UP, S * 48 / 64 / OUT)
    lat = amax * (1 + (n - 1) / m)
    direct = 2 * (bytes_t + lat) + SETUP
    assert float(coll.all_reduce(net, S, 0, 1, ONE["direct"])) == pytest.approx(direct, rel=1e-5)
    # hierarchical: ring RS in the rack, ring AR over 4 racks on S/16, ring AG in the rack, the stages
    # pipelined: the rack links carry the RS and the AG, the scale-out links the AR, at once
    up = 2 * 15 / 16 * S / UP
    out = 2 * 3 / 4 * (S / 16) / OUT
    hier = max(up, out) + 2 * 15 * A_UP + 2 * 3 * A_OUT + SETUP
    assert float(coll.all_reduce(net, S, 0, 1, ONE["hierarchical"])) == pytest.approx(hier, rel=1e-5)


def test_three_levels_hand_calculated(mtia64):
    """No preset has three levels: 16-chip racks, pairs of racks, pairs of pairs (the outer level
    2:1 oversubscribed), on MTIA 300's engines. Each level's alpha and B from make_net (checked
    above); the algorithms' spans, features and recursion by hand."""
    lv = mtia64.levels
    levels = (dataclasses.replace(lv[0], latency_s=jnp.float32(1.5e-6)),
              dataclasses.replace(lv[1], size=32, latency_s=jnp.float32(2.0e-6), name="pod"),
              dataclasses.replace(lv[1], size=64, latency_s=jnp.float32(1.0e-6), oversubscription=jnp.float32(2.0)))
    net = coll.make_net(mtia64.replace(levels=levels), 1.0)
    assert net.fanout == (16, 2, 2)
    a0, a1, a2 = (float(a) for a in net.alpha)
    b0, b1, b2 = (float(b) for b in net.bw)
    assert a1 > a2 and b2 == pytest.approx(b1 / 2, rel=1e-6)
    # tree: the slowest level's bandwidth, the largest alpha (level 1's, not the outermost)
    tree = 2 * S / b2 + 2 * 6 * a1 + SETUP
    assert float(coll.all_reduce(net, S, 0, 2, ONE["tree"])) == pytest.approx(tree, rel=1e-5)
    # hierarchical: RS in the rack, RS across the pair on S/16, all-reduce of the outer pair on S/32,
    # then the all-gathers back, pipelined: levels 1 and 2 share the scale-out link, so their loads add
    up = 2 * 15 / 16 * S / b0
    out = 2 * 1 / 2 * (S / 16) / b1 + 2 * 1 / 2 * (S / 32) / b2
    hier = max(up, out) + 2 * 15 * a0 + 2 * a1 + 2 * a2 + SETUP
    assert float(coll.all_reduce(net, S, 0, 2, ONE["hierarchical"])) == pytest.approx(hier, rel=1e-5)
    # direct all-gather across racks (levels 1-2, a group of 4 chips one per rack): 1 peer first
    # reached in the pair, 2 in the other pair, both over scale-out at once; alpha: the larger of
    # levels 1 and 2; 64 messages in flight
    out = float(net.link_bw["scale_out"])
    direct = S * (1 / 4 * 1.0 + 2 / 4 * 2.0) / out + max(a1, a2) * (1 + 3 / 64) + SETUP
    assert float(coll.all_gather(net, S, 1, 2, ONE["direct"])) == pytest.approx(direct, rel=1e-5)


def test_all_gather_equals_reduce_scatter_transfer_on_ring(mtia64):
    net = coll.make_net(mtia64, 1.0)
    n = 64
    # one ring pass over both levels (see the all-reduce above): 60/64 of the bytes in racks, 4/64 across
    vol = (n - 1) / n * S
    expect = max(vol * 60 / 64 / UP, vol * 4 / 64 / OUT) + (60 * A_UP + 3 * A_OUT) + SETUP
    assert float(coll.all_gather(net, S, 0, 1, ONE["ring"])) == pytest.approx(expect, rel=1e-5)
    # core-driven: the same ring with the fastest protocol (63 steps, all through the NICs); across 4
    # domains NCCL caps LL's bus bandwidth at 20.4 GB/s (tuning.cc llMaxBws, 3+ nodes)
    core = coll.make_net(mtia64, 0.0)
    proto = {p: BASE[p] + 60 * A_UP + 3 * A_OUT + 63 * NET_EXTRA[p]
             + max(max(vol * 60 / 64 / UP, vol * 4 / 64 / OUT) / EFF[p], vol / 20.4e9 if p == "LL" else 0.0) for p in BASE}
    assert min(proto, key=proto.get) == "LL128"
    assert float(coll.all_gather(core, S, 0, 1, ONE["ring"])) == pytest.approx(min(proto.values()) + LAUNCH, rel=1e-5)


def test_uneven_all_to_all_is_set_by_the_slowest_device(mtia64):
    net = coll.make_net(mtia64, 1.0)
    D = 64
    send = np.full((D, 2), 1e6, np.float32)
    recv = np.full((D, 2), 1e6, np.float32)
    send[7, 1] = 50e6                 # device 7 sends 50 MB off the rack
    recv[3, 0] = 90e6                 # device 3 receives 90 MB inside the rack
    t = float(coll.all_to_all(net, jnp.asarray(send), jnp.asarray(recv), ONE["direct"], jnp.max))
    lat = A_UP * (1 + 14 / 64) + A_OUT * (1 + 47 / 64)
    expect = max(50e6 / OUT, 90e6 / UP) + lat + SETUP
    assert t == pytest.approx(expect, rel=1e-5)
    # hierarchical: remote bytes cross the rack first; 3 aggregated messages per remote level
    th = float(coll.all_to_all(net, jnp.asarray(send), jnp.asarray(recv), ONE["hierarchical"], jnp.max))
    lat_h = A_UP * (1 + 14 / 64) + A_OUT * (1 + (48 // 16 - 1) / 64)
    expect_h = max(50e6 / OUT, (1e6 + 50e6) / UP, 90e6 / UP + 1e6 / UP) + lat_h + SETUP
    assert th == pytest.approx(expect_h, rel=1e-5)


def test_a_single_chip_has_no_collective_cost():
    one = pm.load_system("h100-1")
    net = coll.make_net(one, 0.0)
    assert float(coll.all_reduce(net, S, 0, 0, ONE["ring"])) == 0.0
    assert float(coll.reduce_scatter(net, S, 0, 0, ONE["ring"])) == 0.0
    z = jnp.zeros((1, 1))
    assert float(coll.all_to_all(net, z, z, ONE["direct"], jnp.max)) == 0.0


# ------------------------------------------------------------------ NCCL protocols and NVLS (GPUs)

# h200 preset: NVLink4 450 GB/s at NCCL's ~370 effective (0.822), 0.6 us per step (LL); launch 3 us
NVL = 0.822 * 450e9
A_NVL = 0.6e-6


def _ring_protocols_h200(S, n=8):
    """Hand calculation of an n-GPU ring all-reduce on NVLink under each protocol."""
    return {p: BASE[p] + 2 * (n - 1) * (A_NVL + NVL_EXTRA[p]) + 2 * (n - 1) / n * S / (NVL * EFF[p]) for p in BASE}


def _channels(S, per_channel, channels=24):
    """NCCL's share of its channels a collective of S bytes runs on (enqueue.cc): S / per-channel
    bytes of them, at least one, at most all."""
    return min(1.0, max(1.0 / channels, S / (channels * per_channel)))


def test_small_ring_all_reduce_picks_ll_with_its_latency():
    net = coll.make_net(pm.load_system("h200-8"), 0.0)
    S = 32 * 1024
    proto = _ring_protocols_h200(S)
    # LL: 6.6 + 14 x 0.6 us + 1.75 x 32 KiB at half of 370 GB/s = 15.0 + 0.31 us with every channel
    assert proto["LL"] == pytest.approx(6.6e-6 + 8.4e-6 + 1.75 * S / (0.5 * NVL), rel=1e-9)
    parts = coll.ring_parts(net, jnp.float32(S), 0, 0, 2)
    got = [float(x) for x in coll.protocol_times(net, parts)]
    assert got == pytest.approx([proto[p] for p in coll.PROTOCOLS], rel=1e-5)
    # but NCCL gives 32 KiB one channel of 24 (LL: 4 KiB x 8 ranks a channel; LL128 5 KiB; Simple
    # 32 KiB), and LL's bus bandwidth is at most 141 GB/s on one Hopper node (tuning.cc llMaxBws)
    bus = 1.75 * S
    ll = 6.6e-6 + 14 * 0.6e-6 + max(bus / (0.5 * NVL), bus / 141e9) / _channels(S, 4096 * 8)
    ll128 = 14e-6 + 14 * 1.9e-6 + bus / (0.92 * NVL) / _channels(S, 5120)
    simple = 8.4e-6 + 14 * 3.4e-6 + bus / NVL / _channels(S, 32768)
    assert min(ll, ll128, simple) == ll
    assert float(coll.all_reduce(net, S, 0, 0, ONE["ring"])) == pytest.approx(ll + LAUNCH, rel=1e-5)
    # 16 GiB: Simple on every channel, at the full 370 GB/s
    big = 16.0 * 2**30
    proto = _ring_protocols_h200(big)
    assert min(proto, key=proto.get) == "Simple"
    assert float(coll.all_reduce(net, big, 0, 0, ONE["ring"])) == pytest.approx(proto["Simple"] + LAUNCH, rel=1e-5)


def test_nvls_beats_the_ring_for_large_all_reduce_on_h200_and_is_absent_on_a100():
    h200 = coll.make_net(pm.load_system("h200-8"), 0.0)
    assert coll.has_nvls(h200, 0, 0)
    big = 16.0 * 2**30
    nvls = float(coll.nvls_all_reduce(h200, big, 0, 0))
    # S (n+1)/n each way at NVLS's 68 % of 450 GB/s, the fill of its pipeline (16 chunks of 128 KiB on
    # each of 16 channels, at 1/16 of the algorithm's 8/9 of the link rate), 25 us, the call
    rate = 0.68 * 450e9
    fill = 16 * 131072 / (rate * 8 / 9 / 16)
    assert nvls == pytest.approx(big * 9 / 8 / rate + fill + 25e-6 + LAUNCH, rel=1e-5)
    # NCCL's own model of 8 x H100 NVLS: 476 GB/s bus bandwidth
    assert 1.75 * big / nvls == pytest.approx(476e9, rel=0.01)
    ring = float(coll.all_reduce(h200, big, 0, 0, ONE["ring"]))
    assert ring / nvls == pytest.approx(476 / 370, rel=0.01)
    # NCCL's choice and a core-driven direct all-reduce use it
    assert float(coll.nccl_all_reduce(h200, big, 0, 0)) == pytest.approx(nvls, rel=1e-6)
    assert float(coll.all_reduce(h200, big, 0, 0, ONE["direct"])) == pytest.approx(nvls, rel=1e-6)
    # stas00/ml-engineering (network/README.md, NCCL 2.27.7): NCCL picks NVLS on 8 x H200 from 2 MiB up; the model from 4 MiB (its 16-KiB chunks'
    # fill costs NVLS the 2-MiB point)
    for size, picks in ((2**20, False), (2 * 2**20, False), (4 * 2**20, True), (64 * 2**20, True)):
        best = float(coll.nccl_all_reduce(h200, size, 0, 0))
        assert (best == pytest.approx(float(coll.nvls_all_reduce(h200, size, 0, 0)), rel=1e-6)) == picks, size
    # A100's NVSwitch does not reduce; nor does a group spanning several levels
    a100 = coll.make_net(pm.load_system("a100-8"), 0.0)
    assert not coll.has_nvls(a100, 0, 0)
    with pytest.raises(ValueError):
        coll.nvls_all_reduce(a100, big, 0, 0)
    assert not coll.has_nvls(coll.make_net(pm.load_system("h200-64"), 0.0), 0, 1)
    two_shot = float(coll.reduce_scatter(a100, big, 0, 0, ONE["direct"]) + coll.all_gather(a100, big, 0, 0, ONE["direct"])) - LAUNCH
    assert float(coll.all_reduce(a100, big, 0, 0, ONE["direct"])) == pytest.approx(two_shot, rel=1e-5)


def test_engines_keep_their_own_model():
    """MTIA 300 on its engines: no protocols, no NVLS: the formula of the engines alone."""
    net = coll.make_net(pm.load_system("mtia300-16"), 1.0)
    n, S = 16, 32 * 1024
    expect = 2 * (n - 1) / n * S / UP + 2 * (n - 1) * A_UP + SETUP
    assert float(coll.all_reduce(net, S, 0, 0, ONE["ring"])) == pytest.approx(expect, rel=1e-5)


SIZES = [2.0**k for k in range(10, 35, 3)]


@pytest.mark.parametrize("name", ["h200-8", "h200-64", "a100-8", "b200p6-32", "gaudi3-64"])
def test_core_driven_collectives_are_monotone(name):
    """More bandwidth or less latency never slows a collective; more bytes never speed it up."""
    system = pm.load_system(name)
    top = len(system.levels) - 1
    net = coll.make_net(system, 0.0)
    faster = net.retuned(bw=[b * 1.5 for b in net.bw], link_bw={k: v * 1.5 for k, v in net.link_bw.items()},
                         nvls_Bps=net.nvls_Bps * 1.5, ll_max_Bps=net.ll_max_Bps * 1.5)
    quicker = net.retuned(alpha=[a * 0.5 for a in net.alpha], nvls_latency_s=net.nvls_latency_s * 0.5,
                          innet_latency_s=net.innet_latency_s * 0.5, proto_base=tuple(b * 0.5 for b in net.proto_base),
                          proto_step={k: tuple(x * 0.5 for x in v) for k, v in net.proto_step.items()})
    fns = [lambda n, s, a=a: coll.all_reduce(n, s, 0, top, ONE[a]) for a in pm.ALGORITHMS]
    fns += [lambda n, s, a=a: coll.reduce_scatter(n, s, 0, top, ONE[a]) for a in pm.ALGORITHMS]
    fns += [lambda n, s: coll.nccl_all_reduce(n, s, 0, top)]
    for fn in fns:
        base = np.asarray([float(fn(net, s)) for s in SIZES])
        assert np.all(np.diff(base) >= 0)
        assert np.all(np.asarray([float(fn(faster, s)) for s in SIZES]) <= base * (1 + 1e-6))
        assert np.all(np.asarray([float(fn(quicker, s)) for s in SIZES]) <= base * (1 + 1e-6))


def test_protocol_choice_has_finite_gradients():
    system = pm.load_system("h200-64")

    def t(scale, S):
        net = coll.make_net(system, 0.0)
        net = net.retuned(bw=[b * scale for b in net.bw], link_bw={k: v * scale for k, v in net.link_bw.items()})
        return coll.nccl_all_reduce(net, S, 0, 1) + coll.all_reduce(net, S, 0, 1, ONE["ring"])

    for S in SIZES:
        g = jax.grad(t)(1.0, jnp.float32(S))
        assert np.isfinite(float(g)) and float(g) <= 0.0


def test_tree_between_two_nodes_sends_each_byte_once_each_way():
    """NCCL's double binary tree on two nodes: each node roots one tree and is the leaf of the other,
    so each direction of the network carries S per node (S / 8 per chip of 8), half of what it
    carries on more nodes (2 S / 8). p4de: 4 x 100 Gb/s EFA per 8 GPUs at 97 % = 6.0625 GB/s a chip,
    of which a tree all-reduce across nodes gets NCCL's 120/128 with LL128 (0.92 with Simple, so
    LL128 is the faster even at 16 GiB); the network sets the time."""
    big = jnp.float32(2.0**34)
    times = {}
    for n in (16, 64):
        net = coll.make_net(pm.load_system(f"a100p4de-{n}"), 0.0)
        times[n] = float(coll.all_reduce(net, big, 0, 1, ONE["tree"]))
    assert times[16] == pytest.approx(2.0**34 / 8 / (0.97 * 50e9 / 8) / (120 / 128), rel=0.01)
    assert times[64] == pytest.approx(2 * times[16], rel=0.02)


def test_nvls_tree_between_two_nodes_is_bound_by_the_nodes_nics():
    """NVLSTree's tree across domains is the tree's outer part: between two domains each sends S
    (S / 8 a chip of 8), what the other needs to complete its sums. No all-reduce over N domains
    sends less than 2 (N - 1) / N x S a domain, so none of two A3 Mega VMs (8 x 200 Gb/s each)
    beats S / (8 x a NIC's rate), nor of eight 1.75 times that. The large sizes are NIC-bound
    (NVLS inside the VM is faster): on two VMs NCCL's choice takes that bound."""
    big = jnp.float32(2.0**33)
    for n in (16, 64):
        net = coll.make_net(pm.load_system(f"h100a3mega-{n}"), 0.0)
        bound = float(big) / 8 / float(net.bw[1])
        t = float(coll.nccl_all_reduce(net, big, 0, 1))
        N = n // 8
        assert t >= 2 * (N - 1) / N * bound
        if n == 16:
            assert t == pytest.approx(bound, rel=0.02)


def test_tree_correction_is_ncclss_table_joined_continuously():
    """At the middle of each of NCCL's size bins the share is the table's (tuning.cc
    treeCorrectionFactor, Simple); beyond 256 MiB the tree gets its whole bandwidth; the share is
    continuous in between, the same in numpy and jax, with a finite gradient."""
    from perfmodel.cost.collectives import nccl
    table = nccl.TREE_CORRECTION_SIMPLE
    middles = 64.0 * 2.0 ** (np.arange(len(table)) + 0.5)
    assert np.allclose(nccl.tree_correction(np, middles.astype(np.float32)), table, atol=1e-6)
    assert float(nccl.tree_correction(jnp, jnp.float32(2.0**31))) == 1.0
    assert nccl.tree_correction(np, np.float32(2.0**20)).dtype == np.float32
    S = np.float32(3 * 2**20)
    assert float(nccl.tree_correction(jnp, jnp.float32(S))) == pytest.approx(float(nccl.tree_correction(np, S)))
    g = jax.grad(lambda s: nccl.tree_correction(jnp, s))(jnp.float32(S))
    assert np.isfinite(float(g))
    fine = np.float32(2.0) ** np.linspace(6, 30, 2000, dtype=np.float32)
    assert np.max(np.abs(np.diff(nccl.tree_correction(np, fine)))) < 0.02       # no step


def test_tree_all_reduce_is_slowed_by_ncclss_correction_at_mid_sizes():
    """On one node of 8 x A100 the tree is a chain carrying 2 S a chip over NVLink3's 240 GB/s, at
    NCCL's 0.92 share for a Simple tree (LL128's 7/9 on one node is the slower); from 512 MiB up
    the share is whole, so two large sizes give the transfer and the latency; in NCCL's last 0.9 bin
    (192 MiB) the transfer takes 1 / 0.9 as long."""
    net = coll.make_net(pm.load_system("a100-8"), 0.0)
    tree = lambda S: float(coll.all_reduce(net, jnp.float32(S), 0, 0, ONE["tree"]))
    transfer = lambda S: 2 * S / 240e9 / 0.92
    assert tree(2.0**31) - tree(2.0**30) == pytest.approx(transfer(2.0**30), rel=1e-3)
    latency = 2 * tree(2.0**30) - tree(2.0**31)
    assert 0 < latency < 100e-6
    S = 192 * 2**20
    assert tree(S) == pytest.approx(latency + transfer(S) / 0.9, rel=1e-3)


def test_every_algorithm_axis_follows_the_registry():
    """The plans' vocabulary (schema.ALGORITHMS) is the registry's order, and the collectives price
    one time per registered algorithm."""
    from perfmodel.cost.collectives.algorithms import REGISTRY
    from perfmodel.cost.collectives.timing import _algorithm_times
    assert tuple(a.name for a in REGISTRY) == pm.ALGORITHMS
    net = coll.make_net(pm.load_system("h100-16"), jnp.float32(0.0))
    for op in ("all_reduce", "reduce_scatter", "all_gather"):
        eng, core = _algorithm_times(net, op, jnp.float32(1e6), 0, 1)
        assert eng.shape[-1] == core.shape[-1] == len(REGISTRY)
