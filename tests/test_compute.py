"""Dense FLOPs, GEMM roofline times and embedding kernel bytes against hand calculations."""

import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cost.compute import dense_flops, gemm_times, gather_efficiency, matmul_efficiency
from perfmodel.cost.embedding import table_seconds


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
    assert float(gather_efficiency(chip, 128.0)) == pytest.approx(0.40, rel=1e-6)


def test_table_lookup_and_update_bytes(mtia64, mlperf):
    chip = mtia64.chip
    t = 20                                           # 40 M rows, 100 lookups per sample
    fwd, bwd = table_seconds(chip, mlperf, mlperf.tables.dim, jnp.ones(26))
    B, pool, rows = 65536, 100, 40e6
    row = 128 * 4
    gamma = 0.80 * row / (row + 128)
    hbm = 6.1e12 * 0.913
    assert float(fwd[t]) == pytest.approx(B * pool * row / (hbm * gamma), rel=1e-5)
    unique = rows * (1 - np.exp(-B * pool / rows))   # distinct rows touched, uniform access
    state = row + 4                                  # weights + one fp32 Adagrad value per row
    gamma_s = 0.80 * state / (state + 128)
    expect_b = B * pool * row / (hbm * gamma) + 2 * unique * state / (hbm * gamma_s)
    assert float(bwd[t]) == pytest.approx(expect_b, rel=1e-5)


def test_host_offloaded_lookups_go_over_the_host_link(mtia64, mlperf):
    chip = mtia64.chip
    cache = jnp.full(26, 0.25)
    fwd, _ = table_seconds(chip, mlperf, mlperf.tables.dim, cache)
    B, pool, row = 65536, 100, 512
    gamma = 0.80 * row / (row + 128)
    hit = 0.25 ** 1.0                                # uniform access: hit rate = cache ratio
    expect = B * pool * row * (hit / (6.1e12 * 0.913 * gamma) + (1 - hit) / 64e9)
    assert float(fwd[20]) == pytest.approx(expect, rel=1e-5)
