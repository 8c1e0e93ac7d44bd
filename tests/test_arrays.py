"""The cost model in numpy (cost.arrays): a batch of plans evaluated eagerly, with no program to
compile, gives the compiled evaluation's figures, and the search's numpy scores are its compiled ones."""

import dataclasses

import jax
import numpy as np
import pytest

import perfmodel as pm
from perfmodel import cache
from perfmodel.cost.arrays import add_at, as_numpy, lead
from perfmodel.evaluate import step_model
from perfmodel.search.score import eager, score_pairs

# two network levels and core-driven collectives (h100-16), offload engines on an integrated NIC
# (mtia300-64), one level (h100-8) with sequence tables (hstu-seq)
CASES = [("h100-16", "dlrm-dcnv2-mlperf"), ("mtia300-64", "dlrm-dcnv2-mlperf"), ("h100-8", "hstu-seq")]
N = 13      # plans: no axis of these problems has 13 entries, so a batch axis broadcast against another fails


def _plans(system, model, n=N):
    pa = pm.random_plans(jax.random.PRNGKey(5), system, model, n)
    ratio = jax.random.uniform(jax.random.PRNGKey(6), pa.cache_ratio.shape, minval=0.25, maxval=1.0)
    return as_numpy(dataclasses.replace(pa, cache_ratio=ratio))      # some tables partly in host DRAM


@pytest.mark.parametrize("system_name, model_name", CASES)
def test_a_batch_in_numpy_gives_the_compiled_breakdown(system_name, model_name):
    system, model = pm.load_system(system_name), pm.load_model(model_name)
    pa = _plans(system, model)
    compiled = cache.jit(jax.vmap(lambda p: step_model(system, model, p, 0.0)))(pa)     # as the search compiles it
    eager_ = step_model(as_numpy(system), as_numpy(model), pa, 0.0)
    for (path, ref), got in zip(jax.tree_util.tree_leaves_with_path(compiled), jax.tree_util.tree_leaves(eager_)):
        ref, got = np.asarray(ref), np.asarray(got)
        where = jax.tree_util.keystr(path)
        # numpy, batched as vmap batches it; a figure no plan changes (the capacity) without the batch axis
        assert isinstance(got, np.ndarray) and got.shape in (ref.shape, ref.shape[1:]), where
        assert got.dtype == ref.dtype, where                                         # float32 as jax computes
        # a difference of two times (the exposed communication: step - compute) is exact to float32's
        # rounding of the step, not of itself
        atol = 1e-6 * float(np.max(compiled[0].step_s)) if "exposed" in where else 1e-30
        np.testing.assert_allclose(np.broadcast_to(got, ref.shape), ref, rtol=2e-5, atol=atol, err_msg=where)
    # the plans differ: the comparison is not of one plan's figures broadcast
    assert len(np.unique(np.asarray(compiled[0].step_s))) == N


def test_the_search_scores_in_numpy_what_the_compiled_scorer_scores():
    system, model = pm.load_system("h100-16"), pm.load_model("dlrm-dcnv2-mlperf")
    assert eager(system, model) and not eager(pm.load_system("h100-256"), pm.load_model("prod-856"))
    pa = _plans(system, model, 40)
    ref, got = score_pairs(system, model, pa), score_pairs(system, model, pa, eager=True)
    assert got.shape == ref.shape == (2, 40)
    np.testing.assert_allclose(got, ref, rtol=2e-6)
    # infeasible plans (random ones over memory) score INFEASIBLE x (1 + overflow) in both
    assert ((ref[0] >= 1e6) == (got[0] >= 1e6)).all()


def test_lead_and_add_at_are_the_traced_forms():
    x, like = np.arange(3.0), np.zeros((3, 4, 2))
    assert lead(x, like).shape == (3, 1, 1) and lead(np.float32(2.0), like) == 2.0
    y = np.zeros((3, 4, 2))
    got = add_at(y, (slice(1, None),), np.ones((3, 4, 1)))
    assert got[..., 0].sum() == 0 and got[..., 1].sum() == 12 and y.sum() == 0       # out of place
    traced = add_at(jax.numpy.asarray(y), (0,), np.ones((3, 4)))                    # jax's .at[..., 0].add
    np.testing.assert_array_equal(np.asarray(traced), add_at(y, (0,), np.ones((3, 4))))
