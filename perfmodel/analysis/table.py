"""Tidy tables: a pandas DataFrame where pandas imports, else a dict of equal-length numpy columns.

Both index the same way (`table["step_s"]`, iteration gives column names), so the helpers here
and the plots take either.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np

from ..files import write_new

try:  # pandas is optional
    import pandas as _pd
except ImportError:  # pragma: no cover - depends on the environment
    _pd = None


def make_table(columns: dict[str, np.ndarray]):
    """A DataFrame if pandas is installed, else the dict of numpy columns itself."""
    if _pd is not None:
        return _pd.DataFrame(columns)
    return columns


def columns(table) -> dict[str, np.ndarray]:
    """The table as a dict of numpy columns (DataFrame or dict in)."""
    return {str(k): np.asarray(table[k]) for k in table}


def num_rows(table) -> int:
    cols = columns(table)
    return len(next(iter(cols.values()))) if cols else 0


def _cell(x):
    if isinstance(x, (np.bool_, bool)):
        return bool(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating, float)):
        return float(x) if np.isfinite(x) else None     # a failed point: JSON's null, an empty CSV cell
    return x.item() if hasattr(x, "item") else x


def records(table) -> list[dict]:
    """One dict per row, plain Python values (JSON-ready)."""
    cols = columns(table)
    n = num_rows(table)
    return [{k: _cell(v[i]) for k, v in cols.items()} for i in range(n)]


def to_csv_text(table) -> str:
    cols = columns(table)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(cols)
    for row in records(table):
        # 7 significant digits: the model computes in float32, whose noise (449.99999488) is no figure
        w.writerow([f"{v:.7g}" if isinstance(v, float) else v for v in row.values()])
    return buf.getvalue()


def to_json_text(table) -> str:
    return json.dumps(records(table), indent=1)


def save_table(table, path: str | Path) -> None:
    """Write a table as CSV (or JSON records if the name ends in .json); never overwrites."""
    text = to_json_text(table) if str(path).endswith(".json") else to_csv_text(table)
    write_new(path, text)


def format_table(table, cols: list[str] | None = None, max_rows: int = 40) -> str:
    """Fixed-width text of some columns (all by default); long tables show head and tail."""
    data = columns(table)
    cols = cols or list(data)
    n = num_rows(table)
    idx = list(range(n)) if n <= max_rows else list(range(max_rows // 2)) + [-1] + list(range(n - max_rows // 2, n))

    def fmt(v) -> str:
        v = _cell(v)
        if v is None:                     # a failed point (the error column says why), a figure not computed
            return "-"
        if isinstance(v, bool) or isinstance(v, str) or isinstance(v, int):
            return str(v)
        if v == 0 or 1e-3 <= abs(v) < 1e6:
            return f"{v:.4g}"
        if 1e6 <= abs(v) < 1e15:              # samples/s, batches: digits a reader counts, not an exponent
            return f"{v:,.0f}"
        return f"{v:.4e}"

    cells = [[fmt(data[c][i]) if i >= 0 else "..." for c in cols] for i in idx]
    widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(cols)]
    lines = ["  ".join(c.rjust(w) for c, w in zip(cols, widths))]
    lines += ["  ".join(x.rjust(w) for x, w in zip(r, widths)) for r in cells]
    if n > max_rows:
        lines.append(f"({n} rows; {n - 2 * (max_rows // 2)} not shown)")
    return "\n".join(lines)
