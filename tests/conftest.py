"""Shared fixtures: presets load once per session; jitted step functions are reused across tests."""

import functools

import jax
import pytest

import perfmodel as pm
from perfmodel.evaluate import _evaluate


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
def step_fn(model_name: str, temperature: float = 0.0):
    """jit(step_s)(system, plan_arrays) for one model; systems of equal structure share a compile."""
    model = pm.load_model(model_name)
    return jax.jit(lambda system, pa: _evaluate(system, model, pa, temperature).step_s)


@functools.lru_cache(maxsize=None)
def breakdown_fn(model_name: str, temperature: float = 0.0):
    model = pm.load_model(model_name)
    return jax.jit(lambda system, pa: _evaluate(system, model, pa, temperature))
