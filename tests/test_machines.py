"""Machines as built (issue 49, deliverable 5): the 4-GPU HGX H100 as a point-to-point NVLink mesh,
and the network stack's cost per chunk (nic.chunk_overhead_us), by hand."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cost import collectives as coll
from perfmodel.cost.collectives.network import chunked

ONE = {a: jnp.asarray(np.eye(len(pm.ALGORITHMS), dtype=np.float32)[i]) for i, a in enumerate(pm.ALGORITHMS)}
BIG = 16.0 * 2**30          # bytes per GPU: large enough that latencies are < 0.1 % of the time


def test_hgx4_mesh_ring_and_all_to_all_by_hand():
    """h100hgx4-4: 4 GPUs, 18 NVLink4 links each, 6 per peer (150 GB/s/dir a pair). A direct
    all-to-all sends S/4 to each of 3 peers at once, each over its own pair: 0.75 S / 450 GB/s.
    A ring all-reduce's 6 channels (the 6 directed rings, each pair in 2 of them) load all 3 pairs
    too: 2 x 3/4 S / 450 GB/s. Both at NCCL's achievable share of the links (scale_up efficiency);
    no NVSwitch, so no NVLS."""
    system = pm.load_system("h100hgx4-4")
    net = coll.make_net(system, 0.0)
    eff = float(system.chip.scale_up_eff)
    per_gpu = 3 * 6 * 25e9 * eff                       # 3 pairs x 6 links x 25 GB/s/dir
    assert net.fanout == (4,) and not net.reduces[0] and not coll.has_nvls(net, 0, 0)
    assert float(net.bw[0]) == pytest.approx(per_gpu, rel=1e-6)
    ring = float(coll.all_reduce(net, BIG, 0, 0, ONE["ring"]))
    assert ring == pytest.approx(2 * 3 / 4 * BIG / per_gpu, rel=1e-3)
    send = np.full((4, 1), 0.75 * BIG, np.float32)
    a2a = float(coll.all_to_all(net, jnp.asarray(send), jnp.asarray(send), ONE["direct"], jnp.max))
    assert a2a == pytest.approx(0.75 * BIG / per_gpu, rel=1e-3)
    # one pair's share: an all-to-all puts S/4 on each pair's 150 GB/s, as 0.75 S on the 450
    assert a2a == pytest.approx((BIG / 4) / (6 * 25e9 * eff), rel=1e-3)


def _nic(system, **changes):
    return system.replace(nic=dataclasses.replace(system.nic, **changes))


def test_a_message_of_n_chunks_by_hand():
    """A channel of rate B_ch sends n chunks of `chunk` bytes in c (1 + n) + n chunk / B_ch: the
    first chunk's cost c (the step's latency) and c per chunk's worth of bytes, which the chip's
    `channels` channels pay in parallel: its inverse bandwidth grows by c / (chunk x channels)."""
    system = pm.load_system("h100p5-16")
    nic, ch = system.nic, float(system.chip.core_channels)
    c, chunk = float(nic.chunk_s), float(nic.chunk_bytes)
    assert (c, chunk) == (pytest.approx(3e-6), 512 * 1024)     # aws-ofi-nccl's 3 us; NCCL's 4 MiB / 8 steps
    B, alpha = 48e9, 20e-6
    bw, a = (float(x) for x in chunked(B, alpha, nic, ch))
    for n in (1, 4, 64):
        per_channel = alpha + c * (1 + n) + n * chunk / (B / ch)
        assert a + n * chunk / (bw / ch) == pytest.approx(per_channel, rel=1e-6)
    # on h100p5-16 the network level carries it: NIC 4 x 100 Gb/s at its efficiency
    net = coll.make_net(system, 0.0)
    plain = coll.make_net(_nic(system, chunk_s=jnp.float32(0.0)), 0.0)
    assert net.kind == ("nvlink", "net")
    assert 1 / float(net.bw[1]) == pytest.approx(1 / float(plain.bw[1]) + c / (chunk * ch), rel=1e-5)
    assert float(net.alpha[1]) == pytest.approx(float(plain.alpha[1]) + c, rel=1e-6)
    assert float(net.bw[0]) == float(plain.bw[0]) and float(net.alpha[0]) == float(plain.alpha[0])
    # and it slows the 2-node all-reduce
    S = 64 * 2**20
    assert float(coll.nccl_all_reduce(net, S, 0, 1)) > float(coll.nccl_all_reduce(plain, S, 0, 1))


@pytest.mark.parametrize("name", ["h100p5-8", "h100a3mega-8", "a100roce-8", "h100pcie-8"])
def test_one_node_collectives_ignore_the_network_cost_per_chunk(name):
    """One node's collectives run on NVLink / PCIe, never through the network stack: the cost
    per chunk leaves them as they are."""
    system = pm.load_system(name)
    with_c = coll.make_net(_nic(system, chunk_s=jnp.float32(50e-6)), 0.0)
    without = coll.make_net(_nic(system, chunk_s=jnp.float32(0.0)), 0.0)
    assert "net" not in with_c.kind
    for S in (8.0, 1e6, 1e9):
        assert float(coll.all_reduce(with_c, S, 0, len(with_c.fanout) - 1, ONE["ring"])) == \
            float(coll.all_reduce(without, S, 0, len(without.fanout) - 1, ONE["ring"]))
