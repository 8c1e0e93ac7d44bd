"""Reading a study table's figures in SI units, whatever unit its columns carry.

Sweep and scaling tables name each column with its unit (`step_s`, or `step_ms` in human units);
the studies that compute with those figures (sensitivity's re-searched finite differences, the
attribution of a gap) read them here, so a column's unit can change in one place.
"""

from __future__ import annotations

import numpy as np

from .table import columns

# SI column -> (column names it may have, SI per unit of each)
ALIASES = {
    "step_s": (("step_s", 1.0), ("step_ms", 1e-3)),
    "samples_per_s": (("samples_per_s", 1.0),),
    "exposed_comm_s": (("exposed_comm_s", 1.0), ("exposed_comm_ms", 1e-3)),
    "usd_per_million_samples": (("usd_per_million_samples", 1.0),),
    "joules_per_sample": (("joules_per_sample", 1.0), ("mJ_per_sample", 1e-3)),
}


def si_column(table, name: str) -> np.ndarray:
    """The column `name` (an SI name such as step_s) of a study table as float64 in SI units."""
    cols = columns(table)
    for col, scale in ALIASES.get(name, ((name, 1.0),)):
        if col in cols:
            return np.asarray(cols[col], np.float64) * scale
    raise KeyError(f"the table has no column for {name} (columns: {', '.join(cols)})")
