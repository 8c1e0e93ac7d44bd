"""The plan layer: what a plan may be (space), plans as users write them (plans), as the cost
model reads them (arrays), the constraints' meaning for them (limits) and random ones (sample).

A Plan says, per embedding table, its sharding type (TorchRec's names), the ranks holding it and
where it lives (HBM, or host DRAM with an HBM cache ratio); the dense parallelism; the algorithm
and precision of each collective; and the overlap settings. The cost model only ever sees
PlanArrays, so a relaxed plan runs through the very same code as a discrete one. The plan layer
imports nothing from the search, the analyses or the CLI.
"""

from .arrays import (FIELDS, GROUP_FIELDS, ROW_FIELDS, SETTING_FIELDS, TABLE_FIELDS, PlanArrays, build, check_arrays,
                     from_arrays, group_of, plan_arrays, settings_arrays, stack, to_arrays, with_rows)
from .hold import Hold, held_arrays, held_masks, hold_all, parse_hold
from .limits import admissible, check_plan, plan_violations, resolve, violations
from .plans import (Plan, TablePlan, group_problem, load_plan, plan_from_dict, sharding_problem, stand_in,
                    validate_plan)
from .sample import MAX_PLAN_ENTRIES, random_plans, sample_plans, table_rows
from .space import (ALGORITHMS, ALLOWED_ALGORITHMS, COLLECTIVES, COMPUTE_KERNELS, CW, DENSE_MODES, DP,
                    MIN_CW_DIM, NEG, PRECISION_BYTES, PRECISIONS, RW, SHARDING_TYPES, TOL, TW, TWRW, Limits, Masks,
                    compute_kernel, cw_options, domain_ranks, has_hybrid, has_table_row_wise, make_masks, row_partials,
                    splits_evenly, table_ranks, unlimited)

__all__ = [
    "ALGORITHMS", "ALLOWED_ALGORITHMS", "Hold", "held_arrays", "held_masks", "hold_all", "parse_hold", "COLLECTIVES",
    "COMPUTE_KERNELS", "CW", "DENSE_MODES", "DP", "FIELDS", "GROUP_FIELDS",
    "MAX_PLAN_ENTRIES", "MIN_CW_DIM", "NEG", "PRECISION_BYTES", "PRECISIONS", "ROW_FIELDS", "RW", "SETTING_FIELDS",
    "SHARDING_TYPES", "TABLE_FIELDS", "TOL", "TW", "TWRW", "Limits", "Masks", "Plan", "PlanArrays", "TablePlan",
    "admissible", "build", "check_arrays", "check_plan", "compute_kernel", "cw_options", "domain_ranks",
    "from_arrays", "group_of", "group_problem", "has_hybrid", "has_table_row_wise", "load_plan", "make_masks", "plan_arrays", "plan_from_dict",
    "plan_violations", "random_plans", "resolve", "row_partials", "sample_plans", "settings_arrays", "sharding_problem",
    "splits_evenly", "stack", "stand_in", "table_ranks", "table_rows", "to_arrays", "unlimited", "validate_plan",
    "violations", "with_rows",
]
