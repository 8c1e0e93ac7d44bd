"""Embedding storage and all-to-all volumes per sharding type, against hand sums and conservation."""

import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel.cost.embedding import embedding_costs


def _plan(system, model, types):
    """A plan from a per-table list of (sharding_type, ranks)."""
    tables = {n: pm.TablePlan(st, ranks) for n, (st, ranks) in zip(model.tables.names, types)}
    return pm.to_arrays(pm.Plan(tables), system, model)


def test_mlperf_memory_is_204m_rows(mlperf, mtia64):
    rows = np.asarray(mlperf.tables.rows, np.float64)
    assert rows.sum() == pytest.approx(204_184_588, rel=1e-6)
    D = 64
    types = [("table_wise", [i % D]) for i in range(26)]
    emb = embedding_costs(mtia64, mlperf, _plan(mtia64, mlperf, types), 4.0, 4.0)
    # fp32 weights, one fp32 row-wise Adagrad value per row: 204,184,588 x (128 x 4 + 4) bytes
    assert float(jnp.sum(emb.hbm_bytes)) == pytest.approx(204_184_588 * 516, rel=1e-5)
    assert float(jnp.sum(emb.host_bytes)) == 0.0


def test_storage_per_sharding_type(small, mtia64):
    D, L = 64, 16
    size = np.asarray(small.tables.rows) * (64 * 4 + 4)
    types = [("table_wise", [5]), ("column_wise", [1, 2]), ("row_wise", list(range(D))),
             ("table_row_wise", list(range(16, 32))), ("data_parallel", list(range(D))),
             ("table_wise", [5]), ("table_wise", [6]), ("table_wise", [7])]
    emb = embedding_costs(mtia64, small, _plan(mtia64, small, types), 4.0, 4.0)
    hbm = np.asarray(emb.hbm_bytes, np.float64)
    rows = np.asarray(small.tables.rows, np.float64)
    expect = np.zeros(D)
    expect[5] += size[0] + size[5]
    expect[[1, 2]] += rows[1] * (32 * 4 + 4)          # each column shard keeps its own row state
    expect += size[2] / D
    expect[16:32] += size[3] / L
    expect += size[4]                                  # data parallel: a full copy everywhere
    expect[6] += size[6]
    expect[7] += size[7]
    np.testing.assert_allclose(hbm, expect, rtol=1e-5)


def test_table_wise_output_all_to_all_volumes(small, mtia64):
    b = 4096 / 64           # per-device batch: global batch 4,096 over 64 devices
    types = [("table_wise", [3])] * 8
    emb = embedding_costs(mtia64, small, _plan(mtia64, small, types), 2.0, 4.0)
    e = 64 * 2.0                                       # bytes per sample per table (bf16)
    send = np.asarray(emb.out_send)
    recv = np.asarray(emb.out_recv)
    # the holder sends b samples to each of 15 rack peers and 48 remote devices, per table
    assert send[3, 0] == pytest.approx(8 * b * 15 * e, rel=1e-6)
    assert send[3, 1] == pytest.approx(8 * b * 48 * e, rel=1e-6)
    assert send[[0, 4, 40]].sum() == 0.0
    # a rack peer of device 3 receives its b samples from inside the rack; a remote device from outside
    assert recv[0, 0] == pytest.approx(8 * b * e, rel=1e-6) and recv[0, 1] == 0.0
    assert recv[40, 1] == pytest.approx(8 * b * e, rel=1e-6) and recv[40, 0] == 0.0
    assert recv[3].sum() == 0.0
    assert send.sum() == pytest.approx(recv.sum(), rel=1e-6)     # bytes are conserved
    assert float(emb.rw_bytes) == 0.0


@pytest.mark.parametrize("seq", [False, True])
def test_row_wise_and_table_row_wise_conserve_bytes(mtia64, seq):
    model = pm.load_model("hstu-seq") if seq else pm.load_model("dlrm-small")
    T, D = model.tables.count, 64
    types = [("table_row_wise", list(range(16 * (i % 4), 16 * (i % 4) + 16))) for i in range(T)]
    emb = embedding_costs(mtia64, model, _plan(mtia64, model, types), 4.0, 4.0)
    assert float(jnp.sum(emb.out_send)) == pytest.approx(float(jnp.sum(emb.out_recv)), rel=1e-5)
    assert float(jnp.sum(emb.in_send)) == pytest.approx(float(jnp.sum(emb.in_recv)), rel=2e-2)
    types = [("row_wise", list(range(D)))] * T
    emb = embedding_costs(mtia64, model, _plan(mtia64, model, types), 4.0, 4.0)
    e = np.asarray(model.tables.output_per_sample() * model.tables.dim * 4.0)
    pooled = 1 - np.asarray(model.tables.sequence)
    # pooled features: a reduce-scatter of the partial sums of all B samples, B x sum(dim) x 4
    assert float(emb.rw_bytes) == pytest.approx(float(model.global_batch) * (e * pooled).sum(), rel=1e-6)


def test_each_column_shard_runs_its_whole_lookup(small, mtia64):
    """A table split column-wise over k devices: each device looks up all B x pooling rows at
    width dim / k (one shard's full work), not 1/k of it."""
    from perfmodel.cost.embedding import table_seconds
    types = [("column_wise", [1, 2])] + [("table_wise", [5])] * 7
    emb = embedding_costs(mtia64, small, _plan(mtia64, small, types), 4.0, 4.0)
    chip = mtia64.chip
    f, b = (np.asarray(x, np.float64) for x in table_seconds(chip, small, small.tables.dim / 2.0, jnp.ones(8)))
    out_write = 4096 * 64 * 4.0 / float(chip.hbm_Bps * chip.hbm_eff)   # pooled outputs, full width
    launch = float(chip.launch_s)
    assert float(emb.fwd_s[1]) == pytest.approx(f[0] + out_write / 2 + launch, rel=1e-5)
    assert float(emb.bwd_s[2]) == pytest.approx(b[0] + out_write / 2 + launch, rel=1e-5)
    assert float(emb.fwd_s[0]) == pytest.approx(launch, rel=1e-5)      # no table on device 0


def test_table_row_wise_reduce_scatter_then_all_to_all(small, mtia64):
    """Pooled table-row-wise tables: each device reduce-scatters, inside its 16-chip domain, the
    partial sums of all B samples of its domain's tables (tr_bytes); only the reduced B / L share
    leaves the domain, in the all-to-all. The two are separate collectives, one after the other (as
    TorchRec's TwRwPooledEmbeddingDist runs them), so the output distribution takes their sum."""
    from perfmodel.cost import collectives as coll
    from perfmodel.evaluate import evaluate

    D, L, B = 64, 16, 4096.0
    # tables 0-3 on domain 1 (ranks 16..31), 4-7 on domain 3 (48..63)
    types = [("table_row_wise", list(range(16, 32)))] * 4 + [("table_row_wise", list(range(48, 64)))] * 4
    pa = _plan(mtia64, small, types)
    emb = embedding_costs(mtia64, small, pa, 4.0, 4.0)
    e = np.asarray(small.tables.output_per_sample() * small.tables.dim * 4.0, np.float64)   # bytes per sample
    tr = np.asarray(emb.tr_bytes, np.float64)
    np.testing.assert_allclose(tr[16:32], B * e[:4].sum(), rtol=1e-6)
    np.testing.assert_allclose(tr[48:64], B * e[4:].sum(), rtol=1e-6)
    assert tr[:16].sum() == 0.0 and tr[32:48].sum() == 0.0
    send, recv = np.asarray(emb.out_send, np.float64), np.asarray(emb.out_recv, np.float64)
    assert send[:, 0].sum() == 0.0 and recv[:, 0].sum() == 0.0      # nothing of it crosses only the domain
    # a holder sends its B / L share of samples to the 48 devices of the other domains
    assert send[20, 1] == pytest.approx(e[:4].sum() * B / L * (D - L) / D, rel=1e-6)

    plan = pm.Plan({n: pm.TablePlan(st, r) for n, (st, r) in zip(small.tables.names, types)}, overlap_chunks=1)
    bd = evaluate(mtia64, small, plan)
    net = coll.make_net(mtia64, pa.offload)
    rs, a2a = (jnp.eye(len(pm.ALGORITHMS))[pm.ALGORITHMS.index(plan.algorithms[k])] for k in ("reduce_scatter", "all_to_all"))
    t_rs = float(coll.reduce_scatter(net, tr.max(), 0, 0, rs))
    t_a2a = float(coll.all_to_all(net, emb.out_send, emb.out_recv, a2a, lambda x: jnp.max(x, axis=-1)))
    assert t_rs > 0.2 * t_a2a                          # both matter here
    assert float(bd.phase_s["output_dist"][0]) == pytest.approx(t_rs + t_a2a, rel=1e-5)
    moved = np.sum(np.maximum(send, recv), axis=1) + tr * (L - 1) / L
    assert float(bd.comm_bytes["output_dist"]) == pytest.approx(moved.max(), rel=1e-6)


@pytest.mark.parametrize("shape", [(26, 16), (300, 64)])
def test_per_device_sums_over_tables_are_the_matrix_product_on_both_sides_of_the_size_cut(shape):
    # _over_tables sums small placements without a matrix product (SMALL_PLACEMENT) and takes the
    # product on large ones: the same P^T W either way (26 x 16 = 416 entries below the cut, 300 x 64 above)
    from perfmodel.cost.embedding import SMALL_PLACEMENT, _over_tables

    rng = np.random.default_rng(0)
    P = rng.random(shape).astype(np.float32)
    W = rng.random((shape[0], 7)).astype(np.float32)
    assert (shape[0] * shape[1] <= SMALL_PLACEMENT) == (shape == (26, 16))
    np.testing.assert_allclose(np.asarray(_over_tables(jnp.asarray(P), jnp.asarray(W))), P.T @ W, rtol=2e-6)
