"""Compute slowed by a collective that overlaps it: shared compute units and shared HBM bandwidth
(data/measurements/contention: published measurements, each row with its source).

While a collective runs for c seconds next to a compute phase of T seconds (alone), the phase runs
at 1 / r of its speed, r = T' / T:

  units   a core-driven collective holds a share h of the compute units (NCCL's CTAs never share an SM
          with compute: the chip's core_collectives.compute_fraction; offload engines and copy
          engines hold none). A kernel spread over many waves runs on the rest, 1 / (1 - h) slower;
          a kernel sized to the whole grid (one wave, or a persistent kernel) needs a second wave
          for the CTAs that find no unit: 2x for any h > 0 (smoothly: 2 - exp(-U h), U units).
          The FLOP part of a GEMM slows by u = (1 - q) / (1 - h) + q max(1 / (1 - h), 2 - exp(-U h)),
          q the share of GEMM time in whole-grid kernels (compute.full_grid_gemm_share).
  HBM     the collective moves m bytes through HBM per byte it sends or receives (core-driven: 2, a
          store and a load of each byte; by DMA or engines: 1), at rate R = m B / c for B bytes
          sent and received: the kernel's own traffic gets the rest of the achievable bandwidth W,
          a shared-bandwidth roofline: its HBM part slows by beta = W / W', W' = W - R floored
          smoothly at W / 20. A kernel whose own demand leaves room for R is not slowed at all.
  T'      per GEMM max(flop u, mem beta) + elementwise beta + launch; a memory-bound phase (the
          embedding lookups and updates) T beta.

The collective outlasts the phase (c >= T r): the phase takes T r, else c (1 - 1/r) longer than
alone; so the added time is min(T (r - 1), c (1 - 1/r)), which is 0 for r = 1 and grows with h, m
and B, so more HBM bandwidth or fewer collective units never slow a step.
"""

from __future__ import annotations

import numpy as np

from .arrays import xp_of


def unit_excess(chip, held):
    """u - 1: how much slower the FLOP part of a GEMM runs with a share `held` of the units taken."""
    xp = xp_of(held, chip.compute_units)
    spread = held / (1.0 - held)                                      # 1 / (1 - h) - 1
    one_wave = xp.maximum(spread, 1.0 - xp.exp(-chip.compute_units * held))
    q = chip.full_grid_gemm_share
    return (1.0 - q) * spread + q * one_wave


def hbm_excess(chip, rate_Bps):
    """beta - 1: how much slower HBM traffic runs next to a collective streaming `rate_Bps` through HBM."""
    xp = xp_of(rate_Bps, chip.hbm_Bps)
    bw = chip.hbm_Bps * chip.hbm_eff
    x = 1.0 - rate_Bps / bw
    floor = 0.05
    left = xp.minimum(floor * xp.logaddexp(0.0, x / floor), 1.0)     # smooth max(x, 0), >= floor ln 2 at x = 0
    left = xp.maximum(left, floor / 2)       # a collective asking more than HBM gives is itself held back
    return (1.0 - left) / left


def gemm_excess(parts, du, db):
    """How much longer GEMMs take under contention than alone, from their roofline parts
    (compute.gemm_parts, masked to a phase): sum of max(flop u, mem beta) - max(flop, mem), plus
    elem (beta - 1); written in u - 1 and beta - 1 so that float32 keeps small slowdowns exact."""
    flop, mem, elem, launch = parts
    xp = xp_of(flop, du, db)
    du, db = _per_gemm(du), _per_gemm(db)
    ahead = flop - mem
    return xp.sum(xp.maximum(flop * du - xp.maximum(-ahead, 0.0), mem * db - xp.maximum(ahead, 0.0)) + elem * db, axis=-1)


def _per_gemm(x):
    """A per-plan value against the model's [G] GEMMs: in numpy ([N]) with a GEMM axis after it."""
    return x[..., None] if np.ndim(x) else x


def added(plain, excess, comm, mn=None):
    """Time the overlap adds to a phase of `plain` seconds alone, `excess` seconds longer contended,
    next to a collective of `comm` seconds: min(T (r - 1), c (1 - 1/r)) (module docstring)."""
    xp = xp_of(plain, excess, comm)
    mn = mn or xp.minimum
    return mn(excess, comm * ratio(excess, plain + excess))


def ratio(a, b):
    """a / b, and 0 where b is 0, with gradients that stay finite there (no 1 / tiny squared)."""
    xp = xp_of(a, b)
    safe = xp.where(b > 0, b, 1.0)
    return xp.where(b > 0, a / safe, 0.0)
