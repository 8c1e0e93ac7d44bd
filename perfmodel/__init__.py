"""perfmodel: a differentiable performance model of distributed training for ranking models.

    import perfmodel as pm
    system = pm.load_system("mtia300-64"); model = pm.load_model("dlrm-dcnv2-mlperf")
    plan = pm.default_plan(system, model)
    bd = pm.evaluate(system, model, plan)
    res = pm.uncertainty(system, model, plan, draws=1000)   # res.p10, res.p50, res.p90 of the step

Importing perfmodel installs nothing and loads no module of its own: the names below are imported,
with jax, when one is first used (`pm.evaluate`, `from perfmodel import evaluate`), so that the
command line's entry point (perfmodel.cli.main) installs its Ctrl-C handling before jax loads.
"""

import importlib as _importlib
import sys as _sys
import types as _types

__all__ = [
    "enable_compile_cache", "ConfigError", "Constraints", "TableConstraint", "load_constraints", "PHASES", "Breakdown", "evaluate", "Chip", "Level", "Nic", "Offload", "System",
    "link_bandwidths", "load_chip", "load_system", "ALGORITHMS", "COLLECTIVES", "DENSE_MODES", "PRECISIONS",
    "SHARDING_TYPES", "Plan", "PlanArrays", "TablePlan", "load_plan", "plan_from_dict", "random_plans", "stack",
    "to_arrays", "validate_plan", "default_plan", "greedy_plan", "EmbeddingTables", "RankingModel",
    "load_model", "model_names", "SEARCH_METHODS", "SearchResult", "search", "from_arrays",
    "ShardCosts", "load_shard_costs",
    "KNOBS", "knob", "plan_for", "planner", "sensitivity", "set_knobs", "sweep", "compare", "scaling", "attribute",
    "reference_spec", "reference_step", "sharded_reference_step", "calibrate_chip",
    "load_datasets", "validate_published",
    "model_from_tables", "torchrec_plan", "to_torchrec_plan", "load_torchrec_plan", "hugectr_plan",
    "dmp_collection_args", "sharding_group",
    "uncertain_inputs", "uncertainty", "propagate", "attribution_draws", "uncertainty_sources",
]

_state = {"loading": False, "loaded": False}


def _load() -> None:
    """Import the public names into the package (each import below binds nothing but its names)."""
    if _state["loaded"]:
        return
    _state["loading"] = True
    try:
        from .cache import enable_compile_cache
        from .config import ConfigError
        from .constraints import Constraints, TableConstraint, load_constraints
        from .evaluate import PHASES, Breakdown, evaluate
        from .hardware import Chip, Level, Nic, Offload, System, link_bandwidths, load_chip, load_system, sharding_group
        from .plan import (ALGORITHMS, COLLECTIVES, DENSE_MODES, PRECISIONS, SHARDING_TYPES, Plan, PlanArrays,
                           TablePlan, load_plan, plan_from_dict, random_plans, stack, to_arrays, validate_plan)
        from .search.greedy import default_plan, greedy_plan
        from .search.api import METHODS as SEARCH_METHODS, SearchResult, search
        from .search.guard import ShardCosts, load_shard_costs
        from .plan import from_arrays
        from .workload import EmbeddingTables, RankingModel, load_model, model_names
        from .analysis import KNOBS, knob, plan_for, planner, sensitivity, set_knobs, sweep
        from .analysis.scaling import compare, scaling
        from .analysis.attribution import attribute, attribution_draws
        from .reference import load_spec as reference_spec, make_sharded_step as sharded_reference_step, make_step as reference_step
        from .calibrate import calibrate as calibrate_chip
        from .validate import load_datasets, validate as validate_published
        from .interop import dmp_collection_args, load_torchrec_plan, model_from_tables, to_torchrec_plan, torchrec_plan
        from .interop.hugectr import hugectr_plan
        from .uncertainty.inputs import inputs_of as uncertain_inputs
        from .uncertainty.propagate import propagate, uncertainty
        from .uncertainty.decompose import sources as uncertainty_sources
        globals().update({name: value for name, value in locals().items() if name in __all__})
        _state["loaded"] = True
    finally:
        _state["loading"] = False


class _Package(_types.ModuleType):
    """The package: a public name's first use loads the API, a submodule's name imports that module
    alone (perfmodel's own modules ask for their neighbours so while the API loads); a submodule
    never hides the public function of its name (evaluate, search, uncertainty), which the import
    system would otherwise bind on the package when the submodule loads."""

    def __getattr__(self, name: str):
        if name.startswith("_") or _state["loading"]:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        if name in __all__:
            _load()
            return self.__dict__[name]
        try:           # a submodule: that module alone, as the import system's `from perfmodel import x` asks
            return _importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None

    def __setattr__(self, name: str, value) -> None:
        if name in __all__ and isinstance(value, _types.ModuleType):
            return
        super().__setattr__(name, value)

    def __dir__(self):
        return sorted(set(self.__dict__) | set(__all__))


_sys.modules[__name__].__class__ = _Package
