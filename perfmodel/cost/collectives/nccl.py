"""NCCL's own performance model of its collectives, as constants and small rules (NCCL 2.30,
src/graph/tuning.cc and src/enqueue.cc, github.com/NVIDIA/nccl at 2.30.7). The core-driven
collectives of every chip without offload engines run with these protocols, caps and channel rules;
what a chip or its library adds on top (the channel count, LL's bus-bandwidth cap, NVLS's share of
the link, the per-call cost) is in the chip preset's [core_collectives].

  protocols   LL, LL128, Simple. time_p = base_p + sum over steps of hwLat_p[link kind] + bytes /
              (bus bandwidth x share_p); share: LL 0.5 (tuning.cc: "Ring LL: busBw = 0.5 busBw",
              8 data bytes per 16-byte line), LL128 0.92 ("Ring LL128: 0.92 busBw"), Simple 1.
  LL cap      LL's bus bandwidth is at most llMaxBw: per GPU generation on one node (the chip's
              ll_max_bus_GBps: 87.7 Ampere, 141 Hopper, 282 Blackwell), 39 GB/s on two nodes and
              20.4 on three or more (the Intel-host row, tuning.cc llMaxBws).
  channels    a collective of S bytes runs on nc = clamp(S / (threads x threshold), 1, channels)
              channels (enqueue.cc topoGetAlgoInfo): 32 KiB a channel for Simple (512 threads x 64 B),
              5 KiB for LL128 (640 x 8), 4 KiB x ranks for a ring's LL (512 x 8 x nRanks); its bandwidth
              is nc / channels of the whole. NVLS keeps all its channels.
  tree        a tree all-reduce has NCCL's own protocol shares (LL 1/3.8, LL128 7/9 on one node and
              120/128 across nodes, Simple 0.92) and, with Simple, its treeCorrectionFactor by size
              (0.5-0.9 between 8 KiB and 256 MiB); between two nodes its two trees run opposite ways,
              so each byte crosses the network once each way (algorithms/tree.py).
  NVLS        (one scale-up domain whose switch reduces) each chip's link carries S (n+1)/n each way,
              at the NVLS share of the line rate (the chip's scale_up nvls_efficiency: NCCL's 8-GPU
              figure, 8 heads x min(bwIntra x nvlsEfficiency x 7/8 x 2, bwInter), as a share of the
              link), plus its latency (hwLat NVLINK NVLS 25 us); Simple only.
  in-network  (a scale-out level whose switches reduce: SHARP, NCCL's CollNet) each chip sends its
              S once and receives the reduced S once; latency hwLat NET CollNet 31 us plus the NIC's
              latency, Simple only.
"""

from __future__ import annotations

import numpy as np

PROTOCOLS = ("LL", "LL128", "Simple")
# source: tuning.cc baseLatencies, Ring: LL 6.6, LL128 14, Simple 8.4 us
PROTOCOL_BASE_S = (6.6e-6, 14.0e-6, 8.4e-6)
# Per-step latency of each protocol over LL's, by link kind (tuning.cc hwLatencies, Ring: NVLink
# 0.6 / 1.9 / 3.4, PCI 1.0 / 2.5 / 5.7, network 2.7 / 4.0 / 14 us). The presets' per-step latencies
# are the LL ones, so a protocol adds the difference.
PROTOCOL_STEP_S = {"nvlink": (0.0, 1.3e-6, 2.8e-6), "pcie": (0.0, 1.5e-6, 4.7e-6), "net": (0.0, 1.3e-6, 11.3e-6)}
# source: tuning.cc ncclTopoTuneModel: Ring LL busBw x 0.5, Ring LL128 x 0.92, Simple in full
PROTOCOL_SHARE = (0.5, 0.92, 1.0)
# Bytes a channel must have before NCCL adds another (enqueue.cc, threads x threadThresholds):
# LL 512 x 8 (times nRanks for a ring), LL128 640 x 8, Simple 512 x 64
CHANNEL_THRESHOLD_BYTES = (512 * 8, 640 * 8, 512 * 64)
# source: tuning.cc llMaxBws, Intel hosts: LL's bus bandwidth on 2 nodes, on 3 or more (GB/s)
LL_MAX_MULTINODE_BPS = (39.0e9, 20.4e9)
# source: tuning.cc hwLatencies[NVLINK][NVLS][Simple] = 25 us (NCCL >= 2.21); NVLS runs Simple only
NVLS_LATENCY_S = 25e-6
# source: tuning.cc hwLatencies[NET][CollNetDirect][Simple] = 31 us (plus the NIC's latency, twice
# for Simple: "flush extra latency")
INNET_LATENCY_S = 31e-6


# source: tuning.cc ncclTopoTuneModel, a tree's bus bandwidth under each protocol: "Tree LL:
# busBw / 3.8", "Tree LL128: busBw x 7/9" on one node and x 120/128 on several, "Tree AllReduce:
# 0.92 x busBw" (Simple)
TREE_PROTOCOL_SHARE = (1.0 / 3.8, 7.0 / 9.0, 0.92)
TREE_LL128_SHARE_MULTINODE = 120.0 / 128.0
# source: tuning.cc treeCorrectionFactor[Simple], the share of its bandwidth NCCL gives a tree
# all-reduce of 64 x 2^i bytes (i = 0..22: 64 B - 256 MiB, a table of 23); larger ones get it whole.
# (a transcription of the row with a third trailing 0.9 has one entry more than the 23 bins it names)
TREE_CORRECTION_SIMPLE = (0.9,) * 7 + (0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9)


def tree_correction(xp, S):
    """NCCL's bandwidth share of a Simple tree all-reduce of S bytes (TREE_CORRECTION_SIMPLE), its
    steps joined linearly in log2(S) between their middles, so the time is continuous in S."""
    # a sum of unit ramps, one per change of the table (elementwise: no search, no gather)
    f = TREE_CORRECTION_SIMPLE + (1.0,)
    x = xp.log2(xp.maximum(S, np.float32(64.0)) / np.float32(64.0))
    out = np.float32(f[0])
    for i in range(len(f) - 1):
        if f[i + 1] != f[i]:
            out = out + np.float32(f[i + 1] - f[i]) * xp.clip(x - np.float32(i + 0.5), 0.0, 1.0)
    return out


# NVLS's pipeline fills and drains through NCCL_STEPS = 8 slots each way (src/include/collectives.h):
# 16 chunks of each channel's time before its rate holds (assumed: the measured 8 x H200 NVLS curve
# sits above S / rate + latency by 15-60 us at 4 MiB - 1 GiB, as 16 chunks of 16-128 KiB take)
NVLS_PIPELINE_CHUNKS = 16


def ll_cap_Bps(chip_cap, nodes: int):
    """LL's bus-bandwidth cap for a group spanning `nodes` nodes (tuning.cc llMaxBws)."""
    if nodes <= 1:
        return chip_cap
    return LL_MAX_MULTINODE_BPS[0] if nodes == 2 else LL_MAX_MULTINODE_BPS[1]


def nvls_chunk_bytes(xp, S, heads: int, channels: int = 16):
    """NVLS's chunk for S bytes (enqueue.cc calcCollChunking): 128 KiB, stepped down to 64 KiB below
    64 x ops x 128 KiB, 32 KiB below 8 x ops x 64 KiB and 16 KiB below 2 x ops x 32 KiB, with ops =
    channels x heads concurrent operations (8 x H100: 1 GiB, 64 MiB and 8 MiB)."""
    ops = float(channels * heads)
    kib = lambda k: np.float32(1024 * k)
    c = xp.where(S < 64 * ops * 131072, kib(64), kib(128))
    c = xp.where(S < 8 * ops * 65536, kib(32), c)
    return xp.where(S < 2 * ops * 32768, kib(16), c)
