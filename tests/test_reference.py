"""The reference JAX DLRM step: the spec matches the cost model's model, its pieces against numpy by
hand, the single-device step learns, and (in a subprocess with 8 host devices) the sharded step
computes exactly what the single-device step computes, for every placement."""

import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import perfmodel as pm
from perfmodel import reference as ref
from perfmodel.config import ConfigError
from perfmodel.cost.compute import dense_flops


def tiny_dict(**over):
    """A 3-table DLRM small enough to compile in a second; `over` replaces top-level fields."""
    d = dict(name="tiny", global_batch=32, dense_dtype="fp32", param_bytes=4, activation_bytes=4,
             dense_optimizer="adagrad",
             embeddings=dict(dim=8, bytes_per_element=4, optimizer="rowwise_adagrad", index_bytes=4,
                             names=["a", "b", "c"], rows=[50, 20, 200], pooling=[2, 1, 3]),
             dense=dict(layers=[dict(kind="mlp", name="bottom_mlp", stage="bottom", input=5, widths=[16, 8]),
                                dict(kind="dot", name="interaction", stage="top", features=4, dim=8),
                                dict(kind="mlp", name="top_mlp", stage="top", input=14, widths=[16, 1])]))
    d.update(over)
    return d


@pytest.fixture(scope="module")
def tiny():
    return ref.spec_from_dict(tiny_dict())


def test_spec_of_the_presets_is_the_cost_models_model():
    for name in ("dlrm-small", "dlrm-dcnv2-mlperf"):
        spec = ref.load_spec(name)
        model, mine = pm.load_model(name), ref.cost_model(spec)
        assert spec.T == model.tables.count and spec.global_batch == int(model.global_batch)
        assert float(dense_flops(mine)) == pytest.approx(float(dense_flops(model)), rel=1e-7)
        assert float(mine.dense.params()) == pytest.approx(float(model.dense.params()), rel=1e-7)
        n = sum(x.size for x in jax.tree_util.tree_leaves(jax.eval_shape(lambda: ref.init_dense(spec, jax.random.PRNGKey(0)))))
        assert n == int(model.dense.params())            # the reference has exactly the model's parameters
        assert float(mine.tables.index_bytes) == ref.INDEX_BYTES


# mixed dims, a sequence table and a dot interaction of the wrong size are models no loader takes
# (the dot interaction's vectors must match the tables feeding it), so the model's own check names
# the interaction; the others are models only the reference cannot build
@pytest.mark.parametrize("change,field", [
    (lambda d: d["embeddings"].update(dim=[8, 8, 16]), "dense.layers[1].dim"),
    (lambda d: d["embeddings"].update(pooling=[2, 1.5, 3]), "embeddings.pooling"),
    (lambda d: d["embeddings"].update(sequence=[True, False, False]), "dense.layers[1].features"),
    (lambda d: d["dense"]["layers"][1].update(features=5), "dense.layers[1].features"),
    (lambda d: d["dense"]["layers"][2].update(widths=[16, 2]), "dense.layers"),
])
def test_models_the_reference_cannot_build_are_refused_by_field(change, field):
    d = tiny_dict()
    change(d)
    with pytest.raises(ConfigError) as err:
        ref.spec_from_dict(d, "tiny.toml")
    assert err.value.field == field and "tiny.toml" in str(err.value)


def test_embedding_bag_is_a_gather_and_segment_sum():
    table = jnp.arange(12.0).reshape(6, 2)
    idx = jnp.asarray([[0, 5, 5], [2, 1, 9]])            # 9 is out of range: a padding lookup reads zeros
    got = np.asarray(ref.embedding_bag(table, idx))
    want = np.asarray([[0 + 10 + 10, 1 + 11 + 11], [4 + 2 + 0, 5 + 3 + 0]], np.float32)
    np.testing.assert_allclose(got, want)


def test_gram_backward_is_the_symmetric_one_gemm():
    x = jax.random.normal(jax.random.PRNGKey(0), (3, 4, 5))
    w = jax.random.normal(jax.random.PRNGKey(1), (3, 4, 4))
    plain = jax.grad(lambda x: jnp.sum(w * jnp.einsum("bfd,bgd->bfg", x, x)))(x)
    mine = jax.grad(lambda x: jnp.sum(w * ref.gram(x)))(x)
    np.testing.assert_allclose(np.asarray(mine), np.asarray(plain), rtol=1e-5, atol=1e-5)


def test_rowwise_adagrad_by_hand(tiny):
    table = jnp.ones((5, 2))
    state = {"acc": jnp.full((5,), 0.5)}
    ids = jnp.asarray([1, 3, 1, 5])                      # row 1 twice; 5 is padding (dropped)
    g = jnp.asarray([[1.0, 2.0], [0.0, 4.0], [1.0, 0.0], [9.0, 9.0]])
    new, st = ref.sparse_update(tiny, table, state, ids, g)
    g1, g3 = np.asarray([2.0, 2.0]), np.asarray([0.0, 4.0])      # duplicates summed first
    acc1, acc3 = 0.5 + np.mean(g1 ** 2), 0.5 + np.mean(g3 ** 2)
    want = np.ones((5, 2), np.float32)
    want[1] -= tiny.lr * g1 / (np.sqrt(acc1) + tiny.eps)
    want[3] -= tiny.lr * g3 / (np.sqrt(acc3) + tiny.eps)
    np.testing.assert_allclose(np.asarray(new), want, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(st["acc"]), [0.5, acc1, 0.5, acc3, 0.5], rtol=1e-6)


def test_single_device_step_learns_and_the_timed_step_is_the_same_math(tiny):
    state = ref.init_state(tiny, jax.random.PRNGKey(0))
    batch = ref.make_batch(tiny, jax.random.PRNGKey(1))
    step = jax.jit(ref.make_step(tiny))
    s, losses = state, []
    for _ in range(20):
        s, loss = step(s, batch)
        losses.append(float(loss))
    assert losses[-1] < 0.8 * losses[0]                  # it fits one batch
    a, la = step(state, batch)
    b, lb = ref.make_timed_step(tiny)(jax.tree_util.tree_map(jnp.copy, state), batch)
    assert float(la) == pytest.approx(float(lb), rel=1e-6)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-7)


def test_layout_pads_every_device_to_the_largest(tiny):
    system = pm.load_system("h100-8")
    model = ref.cost_model(tiny)
    plan = pm.plan_from_dict({"tables": {"a": {"sharding_type": "table_wise", "ranks": [0]},
                                         "b": {"sharding_type": "table_wise", "ranks": [0]},
                                         "c": {"sharding_type": "column_wise", "ranks": [1, 2]}}}, system, model)
    lay = ref.make_layout(tiny, plan, 8)
    assert lay.S == 2 and lay.W == 8                     # device 0 holds two whole tables
    assert lay.Q == 3 and lay.E == 16                    # it receives 2 + 1 index columns, sends 2 x 8 columns
    assert lay.R == 200                                  # devices 1, 2: 200 rows of c each; device 0: 50 + 20
    with pytest.raises(ConfigError):
        ref.make_layout(tiny, pm.plan_from_dict({"tables": {n: {"sharding_type": "table_row_wise", "ranks": list(range(8))}
                                                            for n in "abc"}}, system, model), 8)


def test_sharded_step_equals_the_single_device_step(tmp_path):
    """8 forced host devices need their own process (XLA_FLAGS before JAX starts). A 6-table model
    (every placement twice over 8 devices, uneven pooling) keeps the compiles short."""
    d = tiny_dict(name="tiny6")
    d["embeddings"].update(names=list("abcdef"), rows=[50, 20, 200, 3000, 7, 64], pooling=[2, 1, 3, 1, 4, 2])
    d["dense"]["layers"][1].update(features=7)
    d["dense"]["layers"][2].update(input=7 * 6 // 2 + 8)
    path = tmp_path / "tiny6.json"
    path.write_text(json.dumps(d))
    cases = [f"{path}:table_wise", f"{path}:mixed+fsdp"]
    args = [sys.executable, "-m", "perfmodel.oracle", "--run", "--json"] + [a for c in cases for a in ("--case", c)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in json.loads(proc.stdout):
        assert r["loss_sharded"] == pytest.approx(r["loss_single"], rel=1e-5), r
        assert r["table_update_max"] > 0                                    # the step did update tables
        assert r["table_max_abs_diff"] <= 1e-4 * r["table_update_max"] + 1e-7, r
        assert r["dense_max_abs_diff"] < 1e-5, r
