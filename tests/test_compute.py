"""Dense FLOPs, GEMM roofline times and embedding kernel bytes against hand calculations."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from perfmodel.cost.compute import (dense_flops, gather_efficiency, gemm_times, llc_factor, llc_hit, matmul_efficiency,
                                    memory_time)
from perfmodel.cost.access import uniform
from perfmodel.cost.embedding import key_preparation, table_parts, table_seconds


def llc_share(tb, t):
    """Table t's part of the last-level cache, by hand: its lookup traffic (pooling x dim) over all the tables'."""
    traffic = np.asarray(tb.pooling, np.float64) * np.asarray(tb.dim, np.float64)
    return float(traffic[t] / traffic.sum())


def test_mlperf_forward_flops_per_sample(mlperf):
    # multiply-accumulates per sample:
    #   bottom 13x512 + 512x256 + 256x128                    =    170,496
    #   DCNv2  3 layers x (3456x512 + 512x3456)               = 10,616,832
    #   top    3456x1024 + 1024x1024 + 1024x512 + 512x256 + 256 = 5,243,136
    macs = 170_496 + 10_616_832 + 5_243_136
    assert float(jnp.sum(mlperf.dense.flops_per_sample())) == pytest.approx(2 * macs, rel=1e-7)
    # training = forward + backward (dX and dW for every weighted GEMM): 3x forward
    assert float(dense_flops(mlperf)) == pytest.approx(6 * macs, rel=1e-7)


def test_dot_interaction_and_transformer_lowering():
    from perfmodel.workload import layer_output_width, lower_layer
    # dot interaction of 27 vectors of 128: X X^T per sample = 27 x 27 x 128 MACs, no weights
    (g,) = lower_layer("dot", {"features": 27, "dim": 128})
    assert g[:4] == (27, 27, 128, False)
    assert layer_output_width("dot", {"features": 27, "dim": 128}) == 27 * 26 / 2 + 128
    # transformer block: 4 d^2 + 2 d ffn weights, 2 S^2 d attention MACs per sample
    gemms = lower_layer("transformer", {"seq_len": 64, "d_model": 32, "heads": 4, "ffn": 128, "layers": 2})
    weights = sum(n * k for m, n, k, w, b in gemms if w)
    attn = sum(m * n * k for m, n, k, w, b in gemms if not w)
    assert weights == 2 * (4 * 32 ** 2 + 2 * 32 * 128)
    assert attn == 2 * (2 * 64 * 64 * 32)


def test_gemm_roofline_by_hand(mtia64, mlperf):
    chip = mtia64.chip
    b = 1024.0
    fwd, bwd = gemm_times(chip, mlperf, b)
    # first top-MLP GEMM after the 6 DCN GEMMs and 3 bottom GEMMs: 3456 -> 1024
    i = 9
    assert (float(mlperf.dense.k[i]), float(mlperf.dense.n[i])) == (3456.0, 1024.0)
    flops = 2 * b * 3456 * 1024
    eff = 0.80 * flops / (flops + 2.0e9)
    t_flop = flops / (560e12 * eff)
    io = b * (3456 + 1024) * 2 + 3456 * 1024 * 4          # bf16 activations, fp32 weights
    t_mem = io / (6.1e12 * 0.913)
    elem = b * 2 * 1024 * 2 / (6.1e12 * 0.913)
    assert float(fwd[i]) == pytest.approx(max(t_flop, t_mem) + elem + 3e-6, rel=1e-5)
    t_flop_b = 2 * flops / (560e12 * eff)
    assert float(bwd[i]) == pytest.approx(max(t_flop_b, 2 * t_mem) + elem + 2 * 3e-6, rel=1e-5)


def test_efficiency_curves_are_half_at_the_half_point(mtia64):
    chip = mtia64.chip
    assert float(matmul_efficiency(chip, 2.0e9)) == pytest.approx(0.40, rel=1e-6)
    assert float(gather_efficiency(chip, 128.0)) == pytest.approx(0.24, rel=1e-6)


def test_table_lookup_and_update_bytes(mtia64, mlperf):
    chip = mtia64.chip
    mlperf = uniform(mlperf)                         # uniform access: the hand formulas below
    t = 20                                           # 40 M rows, 100 lookups per sample
    fwd, bwd = table_seconds(chip, mlperf, mlperf.tables.dim, jnp.ones(26))
    B, pool, rows = 65536, 100, 40e6
    row = 128 * 4
    gamma = 0.48 * row / (row + 128)
    hbm = 6.1e12 * 0.913
    state = row + 4                                  # weights + one fp32 Adagrad value per row
    # the tables share the 192 MB LLC in proportion to their lookup traffic (pooling x dim)
    llc = 192e6 * llc_share(mlperf.tables, t)
    h = llc / (rows * state)                         # the share of the 20.6 GB table the LLC holds
    cached = h * hbm / 11.4e12 + (1 - h)
    assert float(fwd[t]) == pytest.approx(B * pool * row / (hbm * gamma) * cached, rel=1e-5)
    unique = rows * (1 - np.exp(-B * pool / rows))   # distinct rows touched, uniform access
    gamma_s = 0.48 * state / (state + 128)
    # the index sort: n = B pool (int64 index, int32 position) records of 12 B, log_72 n passes
    # (72 PEs: a 72-way distribution per pass), each reading and writing every record; 12 n B =
    # 79 MB fit the 192 MB LLC, so at 11.4 TB/s instead of HBM's 5.57
    n, rec = B * pool, 8 + 4
    gamma_r = 0.48 * rec / (rec + 128)
    sort = 2 * n * (np.log2(n) / np.log2(72)) * rec / (11.4e12 * gamma_r)
    # the deduplication: one pass reading the n sorted records and writing each distinct id (8 B)
    # with an int32 count, in the LLC as the sort
    dedupe = (n * rec + unique * (8 + 4)) / (11.4e12 * gamma_r)
    # the update reads and writes each distinct row once: no re-reference, so no cache hit
    expect_b = B * pool * row / (hbm * gamma) * cached + 2 * unique * state / (hbm * gamma_s) + sort + dedupe
    assert float(bwd[t]) == pytest.approx(expect_b, rel=1e-5)


def test_host_offloaded_lookups_go_over_the_host_link(mtia64, mlperf):
    chip = mtia64.chip
    mlperf = uniform(mlperf)
    cache = jnp.full(26, 0.25)
    fwd, _ = table_seconds(chip, mlperf, mlperf.tables.dim, cache)
    B, pool, row = 65536, 100, 512
    gamma = 0.48 * row / (row + 128)
    hit = 0.25 ** 1.0                                # uniform access: hit rate = cache ratio
    h = 192e6 * llc_share(mlperf.tables, 20) / (0.25 * 40e6 * (row + 4))   # the LLC's part of the quarter in HBM
    cached = h * 6.1e12 * 0.913 / 11.4e12 + (1 - h)
    expect = B * pool * row * (hit / (6.1e12 * 0.913 * gamma) * cached + (1 - hit) / 64e9)
    assert float(fwd[20]) == pytest.approx(expect, rel=1e-5)


def test_a_working_set_that_fits_the_llc_is_read_at_its_bandwidth(mtia64):
    chip = mtia64.chip                               # 192 MB LLC at 11.4 TB/s; HBM 6.1 TB/s x 0.913
    hbm, llc = 6.1e12 * 0.913, 11.4e12
    assert float(llc_hit(chip, 100e6)) == 1.0
    assert float(memory_time(chip, 1e9, 100e6)) == pytest.approx(1e9 / llc, rel=1e-5)
    # 4x the cache: a quarter of the uniform accesses hit it, the rest go to HBM
    assert float(llc_hit(chip, 768e6)) == pytest.approx(0.25, rel=1e-6)
    assert float(memory_time(chip, 1e9, 768e6)) == pytest.approx(1e9 * (0.25 / llc + 0.75 / hbm), rel=1e-5)
    # a cache no faster than the memory behind it changes nothing; with no cache, HBM's time
    slow = dataclasses.replace(chip, llc_Bps=jnp.float32(1e12))
    assert float(llc_factor(slow, 100e6)) == pytest.approx(1.0, rel=1e-6)
    none = dataclasses.replace(chip, llc_bytes=jnp.float32(0.0))
    assert float(memory_time(none, 1e9, 100e6)) == pytest.approx(1e9 / hbm, rel=1e-5)


def test_index_sort_grows_as_n_log_n_and_with_fewer_units(mtia64, small):
    chip = mtia64.chip
    one = jnp.ones(small.tables.count)

    def sort_s(model, units=72.0):
        c = dataclasses.replace(chip, compute_units=jnp.float32(units))
        hbm = c.hbm_Bps * c.hbm_eff
        at = lambda nbytes, rb: nbytes / (hbm * gather_efficiency(c, rb))
        tb = model.tables
        return np.asarray(key_preparation(c, tb, model.global_batch * tb.pooling, tb.rows, at)[0], np.float64)
    B = float(small.global_batch)
    n = B * np.asarray(small.tables.pooling, np.float64)
    doubled = dataclasses.replace(small, global_batch=2.0 * B)
    n_log_n = lambda x: x * np.log2(x)
    # records of every table here fit the LLC at both batches: the time is exactly n log n
    assert np.all(n * 12 * 2 < 192e6)
    np.testing.assert_allclose(sort_s(doubled) / sort_s(small), n_log_n(2 * n) / n_log_n(n), rtol=1e-5)
    # one core merges two ways: log2 n passes instead of log_72 n
    np.testing.assert_allclose(sort_s(small, 1.0) / sort_s(small), np.log2(72), rtol=1e-5)
    # by hand for table 0: 2 n log2(n) / log2(72) x 12 B at gamma(12 B) of the LLC's bandwidth
    gamma_r = 0.48 * 12 / (12 + 128)
    assert sort_s(small)[0] == pytest.approx(2 * n[0] * np.log2(n[0]) / np.log2(72) * 12 / (11.4e12 * gamma_r), rel=1e-5)


def test_a_table_that_fits_the_llc_is_read_at_llc_bandwidth(mtia64, small):
    chip = mtia64.chip
    one = jnp.ones(small.tables.count)
    fwd, _ = table_seconds(chip, small, small.tables.dim, one)
    B, row = 4096.0, 64 * 4
    gamma = 0.48 * row / (row + 128)
    # table 0: 1,000 rows x 260 B (weights + Adagrad state) fit the 192 MB LLC; the cache starts the
    # step cold, so the first touch of each of the ~1,000 distinct rows comes from HBM, every
    # re-reference at 11.4 TB/s
    pool0 = float(small.tables.pooling[0])
    n0 = B * pool0
    reuse = 1 - 1e3 * (1 - np.exp(-n0 / 1e3)) / n0
    expect0 = n0 * row / gamma * (reuse / 11.4e12 + (1 - reuse) / (6.1e12 * 0.913))
    assert float(fwd[0]) == pytest.approx(expect0, rel=1e-5)
    # table 7: 1 M rows = 260 MB; the LLC holds its traffic share of 192 MB of it
    pool7 = float(small.tables.pooling[7])
    # (at most the re-referenced share: 4096 x pool7 lookups touch 1e6 (1 - exp(-4096 pool7 / 1e6)) rows)
    n7 = B * pool7
    h = min(192e6 * llc_share(small.tables, 7) / (1e6 * (row + 4)), 1 - 1e6 * (1 - np.exp(-n7 / 1e6)) / n7)
    expect = B * pool7 * row / gamma * (h / 11.4e12 + (1 - h) / (6.1e12 * 0.913))
    assert float(fwd[7]) == pytest.approx(expect, rel=1e-5)
