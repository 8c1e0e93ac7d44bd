"""perfmodel: a differentiable performance model of distributed training for ranking models.

    import perfmodel as pm
    system = pm.load_system("mtia300-64"); model = pm.load_model("dlrm-dcnv2-mlperf")
    plan = pm.default_plan(system, model)
    bd = pm.evaluate(system, model, plan)
    res = pm.uncertainty(system, model, plan, draws=1000)   # res.p10, res.p50, res.p90 of the step
"""

from .interrupt import install_for_the_command_line as _install_interrupt

_install_interrupt()        # first, before jax loads: `perfmodel` ends on a Ctrl-C in its first seconds too

from .cache import enable_compile_cache  # noqa: E402
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
