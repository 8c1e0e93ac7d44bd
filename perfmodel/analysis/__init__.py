"""Trade-off studies: sweeps over named knobs, elasticities, scaling and cross-system comparisons."""

from .knobs import KNOBS, Knob, knob, set_knobs
from .sensitivity import format_sensitivity, sensitivity
from .sweep import parse_values, parse_vary, summarize, sweep
from .table import columns, format_table, records, save_table

__all__ = ["KNOBS", "Knob", "knob", "set_knobs", "format_sensitivity", "sensitivity", "parse_values", "parse_vary",
           "summarize", "sweep", "columns", "format_table", "records", "save_table"]
