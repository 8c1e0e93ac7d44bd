"""Shared fixtures: presets load once per session; jitted step functions are reused across tests."""

import functools
import os
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import settings

import perfmodel as pm
from perfmodel import cache
from perfmodel.analysis.leaves import log_gradient as _sensitivity_grad
from perfmodel.evaluate import evaluate_arrays

# One compile cache for the run: both xdist workers, the notebooks' kernels and the CLI's subprocesses
# compile many of the same programs (MLPerf on the 64-chip presets, the validation's collectives), and
# each then loads what another compiled. A loaded program is the one compiled, so no verdict changes;
# tests of the cache itself and of a cold process use folders of their own. An environment that sets
# PERFMODEL_CACHE_DIR (empty: off) keeps its own choice.
os.environ.setdefault("PERFMODEL_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "perfmodel-jax"))
pm.enable_compile_cache()
# The suite's two xdist workers already hold the two cores: a study's default process pool would start
# more processes, each importing and loading the same programs, to share the same cores. Its jobs
# run in the calling process; the tests of the pool give their workers.
os.environ.setdefault("PERFMODEL_WORKERS", "1")
# Property tests draw the same examples in every run (derandomized), so that a verdict is the code's and
# not the draw's; HYPOTHESIS_PROFILE=explore draws fresh examples each run, to hunt for new failures
settings.register_profile("suite", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


@pytest.fixture(scope="session")
def mtia16():
    return pm.load_system("mtia300-16")


@pytest.fixture(scope="session")
def mtia64():
    return pm.load_system("mtia300-64")


@pytest.fixture(scope="session")
def h100_64():
    return pm.load_system("h100-64")


@pytest.fixture(scope="session")
def mlperf():
    return pm.load_model("dlrm-dcnv2-mlperf")


@pytest.fixture(scope="session")
def small():
    return pm.load_model("dlrm-small")


@functools.lru_cache(maxsize=None)
def step_of(model_name: str, temperature: float = 0.0):
    """step_s(system, plan_arrays) for one model, not compiled: for a test's own jit of its vmap or grad."""
    model = pm.load_model(model_name)
    return lambda system, pa: evaluate_arrays(system, model, pa, temperature).step_s


@functools.lru_cache(maxsize=None)
def step_fn(model_name: str, temperature: float = 0.0):
    """jit(step_s)(system, plan_arrays) for one model; systems of equal structure share a compile.
    Compiled with the XLA options of pm.evaluate (cache.jit, quick): the program the tests check is
    the one a user runs, and it compiles faster than with XLA's defaults. (Options go on a top-level
    jit only: under a test's vmap or grad, jit step_of's function instead.)"""
    return cache.jit(step_of(model_name, temperature), quick=True)


@functools.lru_cache(maxsize=None)
def breakdown_fn(model_name: str, temperature: float = 0.0):
    model = pm.load_model(model_name)
    return cache.jit(lambda system, pa: evaluate_arrays(system, model, pa, temperature), quick=True)


@functools.lru_cache(maxsize=None)
def grad_fn(model_name: str):
    """d step_s / d System, the plan's arrays an argument, through pm.sensitivity's compiled gradient
    (of log step, times the step): one compile per system structure, shared by every test that
    differentiates this model on it and by notebook 01's sensitivity table (the other worker and the
    notebook's kernel load it from the run's compile cache)."""
    model = pm.load_model(model_name)

    def grad(system, pa):
        step, g = _sensitivity_grad(system, model, pa, "step_s")
        return jax.tree_util.tree_map(lambda x: np.asarray(x) * np.float32(step), g)
    return grad
