"""Compute times: roofline with smooth efficiency curves, for dense GEMMs and embedding kernels.

GEMM:   t = max(F / (peak * eta(F)), bytes / (B_hbm * e_hbm)) + t_launch,
        eta(F) = eta_max * F / (F + F_half)          (saturating in the GEMM's FLOPs)
Gather: t = bytes / (B_hbm * e_hbm * gamma(r)),  gamma(r) = gamma_max * r / (r + r_half)
        for random reads of rows of r bytes (embedding lookups). By Little's law r_half is the row
        size at which the compute units' rows in flight cover HBM's bandwidth-latency product,
        so it grows with HBM bandwidth per unit: each chip preset derives it from its own
        (docs/sources.md [gather-concurrency]); gamma_max, how well random rows use HBM once
        enough are in flight, is fitted on the GPUs' runs ([gpu-gather-fit]).
Cache:  traffic over a working set of W bytes, accessed uniformly, hits the last-level cache
        (C bytes) with probability h = min(1, C / W):
        t = bytes (h / B_llc + (1 - h) / (B_hbm * e_hbm)),  B_llc = max(llc_Bps, B_hbm * e_hbm)
"""

from __future__ import annotations

from ..hardware import Chip
from ..workload import RankingModel
from .arrays import xp_of


def peak_flops(chip: Chip, dtype: str):
    return {"bf16": chip.peak_bf16_flops, "fp8": chip.peak_fp8_flops, "fp32": chip.peak_fp32_flops}[dtype]


def matmul_efficiency(chip: Chip, flops):
    return chip.matmul_eff_max * flops / (flops + chip.matmul_half_flop)


def gather_efficiency(chip: Chip, row_bytes):
    return chip.gather_eff_max * row_bytes / (row_bytes + chip.gather_half_row_bytes)


def hbm_time(chip: Chip, nbytes):
    """Streaming HBM traffic at the achievable bandwidth."""
    return nbytes / (chip.hbm_Bps * chip.hbm_eff)


def llc_hit(chip: Chip, working_set_bytes):
    """Share of uniform accesses to a working set of W bytes served by the last-level cache:
    h = min(1, C / W) (the cache holds C of the W bytes; every byte is equally likely)."""
    xp = xp_of(chip.llc_bytes, working_set_bytes)
    return xp.minimum(1.0, chip.llc_bytes / xp.maximum(working_set_bytes, 1.0))


def llc_factor(chip: Chip, working_set_bytes):
    """Time of traffic over a working set of W bytes relative to the same traffic from HBM:
    h B_hbm e_hbm / B_llc + (1 - h), with B_llc = max(llc_Bps, B_hbm e_hbm) (a cache is never
    slower than the memory behind it, so a bigger cache or faster memory never slows anything)."""
    hbm = chip.hbm_Bps * chip.hbm_eff
    h = llc_hit(chip, working_set_bytes)
    return h * hbm / xp_of(chip.llc_Bps, hbm).maximum(chip.llc_Bps, hbm) + (1.0 - h)


def memory_time(chip: Chip, nbytes, working_set_bytes):
    """Streaming traffic of nbytes over a working set of W bytes: the cached share at the LLC
    bandwidth, the rest at HBM's (see llc_factor)."""
    return hbm_time(chip, nbytes) * llc_factor(chip, working_set_bytes)


def gemm_parts(chip: Chip, model: RankingModel, local_batch):
    """The roofline parts of each dense GEMM (arrays [G]) for `local_batch` samples, forward and
    backward: (flop_s, mem_s, elem_s, launch_s) each, where the GEMM takes max(flop_s, mem_s) +
    elem_s + launch_s (gemm_times).

    Forward F = 2 b m n k; backward computes dX and dW: 2F (dW only where the GEMM has weights,
    dX always). Bytes: inputs, outputs and weights once, plus the elementwise traffic after it.
    """
    d, ab, pb = model.dense, model.activation_bytes, model.param_bytes
    peak = peak_flops(chip, model.dense_dtype)
    flops = 2.0 * local_batch * d.m * d.n * d.k
    io = local_batch * d.m * (d.n + d.k) * ab + d.weighted * d.n * d.k * pb
    elem = hbm_time(chip, local_batch * d.elementwise * ab)
    eff = peak * matmul_efficiency(chip, flops)
    fwd = (flops / eff, hbm_time(chip, io), elem, chip.launch_s + 0.0 * flops)
    bwd = (flops * (1.0 + d.weighted) / eff, hbm_time(chip, 2.0 * io), elem, chip.launch_s * (1.0 + d.weighted))
    return fwd, bwd


def roofline(parts):
    """Time of GEMMs from their parts: max(flop_s, mem_s) + elem_s + launch_s."""
    flop, mem, elem, launch = parts
    return xp_of(flop, mem).maximum(flop, mem) + elem + launch


def gemm_times(chip: Chip, model: RankingModel, local_batch):
    """Forward and backward time of each dense GEMM (arrays [G]) for `local_batch` samples (gemm_parts)."""
    fwd, bwd = gemm_parts(chip, model, local_batch)
    return roofline(fwd), roofline(bwd)


def dense_flops(model: RankingModel):
    """Training FLOPs per sample of the dense part: forward + backward (dX always, dW if weighted)."""
    f = model.dense.flops_per_sample()
    return (f * (2.0 + model.dense.weighted)).sum()
