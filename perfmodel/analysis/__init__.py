"""Trade-off studies: sweeps over named knobs, elasticities, scaling and cross-system comparisons."""

from ..knobs import KNOBS, Knob, knob, set_knobs
from .planning import STUDY_ITERATIONS, Planner, plan_for, planner
from .sensitivity import format_sensitivity, sensitivity
from .sweep import parse_values, parse_vary, summarize, sweep
from .table import columns, format_table, records, save_table

__all__ = ["KNOBS", "Knob", "knob", "set_knobs", "STUDY_ITERATIONS", "Planner", "plan_for", "planner", "format_sensitivity", "sensitivity", "parse_values", "parse_vary",
           "summarize", "sweep", "columns", "format_table", "records", "save_table"]
