"""Reading a measurement CSV: one clear error for a file that is missing, unreadable, not UTF-8 or
short of a column (the three kinds of validation share it)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

from ..config import DATA_DIR, ConfigError, csv_error, read_text


def read_rows(path: Path, columns: tuple[str, ...], what: str) -> list[tuple[str, dict]]:
    """(where, row) of every data row of the CSV at `path`, `where` its "file:line"; `what` names
    the file in errors ("dataset", "step dataset", ...). The file is read as config files are
    (config.read_text: a regular file, of bounded size, UTF-8)."""
    text = read_text(path, f"{what} (a UTF-8 CSV)")
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(str(path), missing[0], f"column is missing; a {what} has columns {', '.join(columns)}")
        rows = []
        for raw in reader:
            where = f"{path}:{reader.line_num}"
            # csv fills a short row's last columns with None and keeps a long row's extra cells under
            # None: a comma too many or too few moves every later cell into the wrong column
            if None in raw or None in raw.values():
                cells = len(raw) - (None in raw) + len(raw.get(None) or ()) - sum(v is None for v in raw.values())
                raise ConfigError(where, "", f"has {cells} cells; the header has {len(reader.fieldnames)} (quote a "
                                  f"cell that holds a comma)")
            rows.append((where, raw))
        return rows
    except csv.Error as err:        # a cell over csv's field size limit, a NUL byte
        raise csv_error(path, err) from None


def shown(path: Path) -> str:
    """How a report names a dataset's file: relative to the checkout for the bundled data (so a
    stored report reads the same on every machine), the path as given otherwise."""
    try:
        return Path(path).resolve().relative_to(DATA_DIR.parent).as_posix()
    except ValueError:
        return str(path)
