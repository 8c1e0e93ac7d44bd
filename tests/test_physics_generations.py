"""Physics that carries across chip generations (docs/sources.md [b200-hbm], [launch-costs],
[gather-concurrency], [key-sort]): each against a hand calculation from the published figures."""

from types import SimpleNamespace

import numpy as np
import pytest

from perfmodel.cost.compute import gather_efficiency
from perfmodel.cost.embedding import key_preparation

NVIDIA = ("a100", "h100", "h100pcie", "h100cap", "h200", "h800", "b200", "gb200", "b300")
ROW_LATENCY_S = 128.0 / (3350e9 * 0.90 / 132)      # the SMs' rows in flight x latency: 128 B at H100's HBM per SM


@pytest.fixture(scope="module")
def chips():
    from perfmodel.hardware import load_chip
    return {n: load_chip(n) for n in NVIDIA + ("mtia300",)}


def test_b200_hbm_is_the_driver_reported_peak(chips):
    # pytorch/ao PR #4002: a 7,680-bit bus, 7.67 TB/s (the product page rounds to 8)
    assert float(chips["b200"].hbm_Bps) == pytest.approx(7.67e12)


def test_launch_costs_are_the_graph_replayed_kernels(chips):
    # te42kyfo/gpu-benches: 1.56 us (A100) and 1.3 us (H200) per tiny kernel inside a CUDA graph;
    # Blackwell's raw launch is 3.0-3.3 us on GB200 (tritonbench PR #1017) against H200's 2.5
    assert float(chips["a100"].launch_s) == pytest.approx(1.56e-6)
    assert float(chips["h200"].launch_s) == pytest.approx(1.3e-6)
    for name in ("b200", "gb200", "b300"):
        assert float(chips[name].launch_s) == pytest.approx(1.3e-6 * 3.15 / 2.5, rel=0.01)
    # NCCL's per-call cost stays a call's, not a graph node's
    assert float(chips["h100"].core_call_s) == pytest.approx(3e-6)


@pytest.mark.parametrize("name", NVIDIA)
def test_gather_ramp_follows_the_bandwidth_per_sm(chips, name):
    """Little's law: rows of r_half bytes in flight per SM cover HBM's bandwidth-latency product, so
    r_half = (rows in flight x latency per SM) x B_hbm e_hbm / SMs, the first factor one for every
    NVIDIA SM (docs/sources.md [gather-concurrency])."""
    c = chips[name]
    per_sm = float(c.hbm_Bps * c.hbm_eff / c.compute_units)
    assert float(c.gather_half_row_bytes) == pytest.approx(ROW_LATENCY_S * per_sm, abs=0.6)


def test_a_faster_memory_on_as_many_sms_gathers_a_smaller_share(chips):
    """At MLPerf's 512-byte rows the share of peak falls with HBM bandwidth per SM: A100 > H100 >
    H200 > B200 (by hand: 0.8419, 0.8, 0.7363, 0.6624 of the fitted maximum)."""
    share = {n: float(gather_efficiency(chips[n], 512.0) / chips[n].gather_eff_max) for n in ("a100", "h100", "h200", "b200")}
    assert share["a100"] == pytest.approx(512 / (512 + 95), rel=1e-4)
    assert share["b200"] == pytest.approx(512 / (512 + 261), rel=1e-4)
    assert share["a100"] > share["h100"] > share["h200"] > share["b200"]


def test_mtia_takes_the_gpus_fitted_row_efficiency(chips):
    """MTIA 300's embedding path is priced by the same mechanism: the fitted random-row efficiency of
    HBM with enough rows in flight, and a ramp set by its own units' concurrency."""
    assert float(chips["mtia300"].gather_eff_max) == pytest.approx(float(chips["h100"].gather_eff_max))


def _sort_s(c, n):
    tb = SimpleNamespace(index_bytes=4.0)          # 4 B id + 4 B position: an 8-byte record, as a 64-bit key
    hbm = c.hbm_Bps * c.hbm_eff
    at = lambda nbytes, row: nbytes / (hbm * gather_efficiency(c, row))
    sort, _ = key_preparation(c, tb, np.float32(n), np.float32(n), at)
    return float(sort)


def test_key_sort_on_b200_against_cccl(chips):
    """NVIDIA/cccl PRs #3611 / #3626: 1 M 64-bit keys sort in 201 us on B200. The model's sort of
    8-byte records is latency-bound at that size (tiny rows at the gather ramp's foot); within 2x of
    the measurement, and within 30 % of H100's time although B200 has 2.3x the bandwidth."""
    b200, h100 = _sort_s(chips["b200"], 1e6), _sort_s(chips["h100"], 1e6)
    assert 100e-6 < b200 < 400e-6
    assert 0.7 < b200 / h100 < 1.3
