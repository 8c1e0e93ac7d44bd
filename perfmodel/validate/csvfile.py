"""Reading a measurement CSV: one clear error for a file that is missing, unreadable, not UTF-8 or
short of a column (the three kinds of validation share it)."""

from __future__ import annotations

import csv
from pathlib import Path

from ..config import DATA_DIR, ConfigError


def read_rows(path: Path, columns: tuple[str, ...], what: str) -> list[tuple[str, dict]]:
    """(where, row) of every data row of the CSV at `path`, `where` its "file:line"; `what` names
    the file in errors ("dataset", "step dataset", ...)."""
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            missing = [c for c in columns if c not in (reader.fieldnames or [])]
            if missing:
                raise ConfigError(str(path), missing[0], f"column is missing; a {what} has columns {', '.join(columns)}")
            return [(f"{path}:{i}", raw) for i, raw in enumerate(reader, start=2)]
    except FileNotFoundError:
        raise ConfigError(str(path), "", f"no such file of {what}s") from None
    except UnicodeDecodeError as err:
        raise ConfigError(str(path), "", f"is not UTF-8 text (byte {err.start}: {err.reason}); a {what} is a "
                          "UTF-8 CSV") from None
    except (OSError, csv.Error) as err:
        raise ConfigError(str(path), "", f"cannot be read: {getattr(err, 'strerror', None) or err}") from None


def shown(path: Path) -> str:
    """How a report names a dataset's file: relative to the checkout for the bundled data (so a
    stored report reads the same on every machine), the path as given otherwise."""
    try:
        return Path(path).resolve().relative_to(DATA_DIR.parent).as_posix()
    except ValueError:
        return str(path)
