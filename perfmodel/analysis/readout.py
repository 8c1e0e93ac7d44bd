"""Reading a study table's figures in SI units, whatever unit its columns carry.

Sweep, scaling and compare tables name each column with its human unit (`step_ms`,
`memory_max_GB`: sweep.COLUMNS says which column holds which SI figure and by what factor); the
studies that compute with those figures (sensitivity's re-searched finite differences, compare's
table and attribution) read them here in SI, so a column's unit changes in sweep.COLUMNS alone.
"""

from __future__ import annotations

import numpy as np

from .sweep import COLUMNS
from .table import columns


def si_column(table, name: str) -> np.ndarray:
    """The figure `name` (an SI name such as step_s) of a study table as float64 in SI units."""
    cols = columns(table)
    if name in cols:
        return np.asarray(cols[name], np.float64)
    for col, (key, factor) in COLUMNS.items():
        if key == name and col in cols:
            return np.asarray(cols[col], np.float64) * (1.0 / factor)
    raise KeyError(f"the table has no column for {name} (columns: {', '.join(cols)})")
