"""Tables in: a model from TorchRec EmbeddingBagConfigs, dicts or a CSV of tables.

    model = pm.model_from_tables(configs, pooling_factors={"f_user": 3.0}, dense="dlrm-dcnv2-mlperf")

A table is read by attribute (an EmbeddingBagConfig; torchrec need not be installed) or by key (a
dict, a CSV row): name, num_embeddings, embedding_dim, feature_names, and optionally data_type
(TorchRec's DataType, FP32 by default as in TorchRec), pooling (SUM, MEAN or NONE: NONE, or an
object without a `pooling` attribute such as an EmbeddingConfig, is an unpooled sequence feature)
and pooling_factor (mean lookups per sample of each feature: one number, or one per feature).
Several features on one table add their lookups and each returns its own pooled vector.

The dense part comes from a model preset: its layers, with the widths that depend on the tables
recomputed as DLRM and DCNv2 define them (TorchRec's DLRM / DLRM_DCN): the bottom MLP ends at the
embedding dim where the preset's does, a dot interaction takes F + 1 vectors of that dim (F pooled
features), a DCNv2 cross network and a concatenating MLP take sum(feature dims) + the bottom
output, and each later layer takes its predecessor's output. Every other setting (dense dtype,
optimizers, index bytes, batch) is the preset's. The model is built by `workload.parse_model` from a
dict shaped like a model file, so it meets every check a model file does, and `model_file_text`
writes that dict as a model file that `load_model` reads back to the same model.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..config import ConfigError, Num, check_number, csv_error, read_file, read_text, shown
from ..presets import locate
from ..schema import MAX_TABLES, MODEL
from ..workload import RankingModel, layer_output_width, parse_model

# bytes per element of TorchRec's DataType values that hold embedding weights
DATA_TYPES = {"FP32": 4.0, "FP16": 2.0, "BF16": 2.0, "NFP8": 1.0, "INT8": 1.0, "UINT8": 1.0, "INT4": 0.5, "INT2": 0.25}
POOLINGS = ("SUM", "MEAN", "NONE")
CSV_COLUMNS = ("name", "num_embeddings", "embedding_dim", "feature_names", "pooling_factor", "data_type", "pooling")
CSV_REQUIRED = CSV_COLUMNS[:4]
_POOL = Num("pooling_factor", lo=MODEL["embeddings.pooling"].lo, hi=MODEL["embeddings.pooling"].hi,
            unit="lookups/sample")


@dataclass(frozen=True)
class Table:
    """One table as read: its features and their pooling factors, and where it came from."""

    name: str
    rows: int
    dim: int
    features: tuple[str, ...]
    pooling: tuple[float, ...]        # per feature, mean lookups per sample
    data_type: str
    sequence: bool
    where: str                        # "tables.csv row 3", "tables[2]"


# ------------------------------------------------------------------------------------ reading

def _get(t: Any, key: str, default: Any = None) -> Any:
    """A field of a table, by key (dict, CSV row) or by attribute (EmbeddingBagConfig)."""
    if isinstance(t, Mapping):
        v = t.get(key, default)
        v = default if isinstance(v, str) and v == "" else v      # an empty CSV cell is a value not given
    else:
        v = getattr(t, key, default)
    return v.item() if isinstance(v, np.generic) else v         # numpy scalars (a table built from arrays)


def _enum_name(v: Any) -> Any:
    """TorchRec's enums (DataType.FP16, PoolingType.SUM) by their value; strings as they are."""
    return getattr(v, "value", v)


def _whole(v: Any, field: str, src: str, where: str) -> int:
    spec = MODEL[field].num()
    name = field.split(".")[-1]
    key = {"rows": "num_embeddings", "dim": "embedding_dim"}[name]
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise ConfigError(src, f"{where}.{key}", f"must be {spec.allowed()}, got {shown(v)}") from None
    return int(check_number(v, spec, src, f"{where}.{key}"))


def _number(v: Any, src: str, field: str) -> float:
    if isinstance(v, str):
        try:
            v = float(v.strip())
        except ValueError:
            raise ConfigError(src, field, f"must be {_POOL.allowed()}, got {shown(v)}") from None
    return check_number(v, _POOL, src, field)


def _features(t: Any, src: str, where: str) -> tuple[str, ...]:
    raw = _get(t, "feature_names")
    if isinstance(raw, str):                     # a CSV cell: names separated by ';'
        raw = [x.strip() for x in raw.split(";")]
    ok = isinstance(raw, (list, tuple)) and raw and all(isinstance(x, str) and x for x in raw)
    if not ok:
        raise ConfigError(src, f"{where}.feature_names", "must list the table's features (a non-empty list of "
                          f"names; in a CSV, names separated by ';'), got {shown(raw)}")
    if len(set(raw)) != len(raw):
        dup = next(x for x in raw if raw.count(x) > 1)
        raise ConfigError(src, f"{where}.feature_names", f"lists feature {dup!r} twice")
    return tuple(raw)


def _poolings(t: Any, features: tuple[str, ...], given: Any, src: str, where: str) -> tuple[float, ...]:
    """Per feature: the table's own pooling_factor (one number or one per feature), else
    pooling_factors[feature], else pooling_factors when it is one number."""
    own = _get(t, "pooling_factor")
    field = f"{where}.pooling_factor"
    if isinstance(own, str) and ";" in own:
        own = [x.strip() for x in own.split(";")]
    if own is not None:
        if isinstance(own, (list, tuple)):
            if len(own) != len(features):
                raise ConfigError(src, field, f"has {len(own)} values for {len(features)} features "
                                  f"({', '.join(features)}): give one number, or one per feature")
            values = [_number(v, src, f"{field}[{i}]") for i, v in enumerate(own)]
        else:
            values = [_number(own, src, field)] * len(features)
        twice = [f for f in features if isinstance(given, Mapping) and f in given]
        if twice:
            raise ConfigError(src, field, f"feature {twice[0]!r} has a pooling factor here and in pooling_factors; "
                              "give it once")
        return tuple(values)
    out = []
    for f in features:
        if isinstance(given, Mapping) and f in given:
            value = given[f]
            out.append(_number(value.item() if isinstance(value, np.generic) else value, "", f"pooling_factors[{f!r}]"))
        elif given is not None and not isinstance(given, Mapping):
            out.append(_number(given, "", "pooling_factors"))
        else:
            raise ConfigError(src, field, f"is missing for feature {f!r}: give the table a pooling_factor (mean "
                              "lookups per sample), or a default for every feature (pooling_factors= in Python, "
                              "a number or {feature: lookups}; --pooling-factor to import-tables)")
    return tuple(out)


def read_table(t: Any, pooling_factors: Any, src: str, where: str) -> Table:
    """One table, every field checked (ConfigError naming `src`, the table and the field)."""
    name = _get(t, "name")
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(src, f"{where}.name", f"must be a non-empty table name, got {shown(name)}")
    where = f"{where} ({name!r})"
    rows = _whole(_get(t, "num_embeddings"), "embeddings.rows", src, where)
    dim = _whole(_get(t, "embedding_dim"), "embeddings.dim", src, where)
    features = _features(t, src, where)
    dtype = str(_enum_name(_get(t, "data_type", "FP32"))).strip().upper()
    if dtype not in DATA_TYPES:
        raise ConfigError(src, f"{where}.data_type", f"is {shown(_get(t, 'data_type'))}; allowed: "
                          f"{', '.join(DATA_TYPES)} (TorchRec's DataType of embedding weights)")
    has_pooling = isinstance(t, Mapping) or hasattr(t, "pooling")
    pooling = str(_enum_name(_get(t, "pooling", "SUM" if has_pooling else "NONE"))).strip().upper()
    if pooling not in POOLINGS:
        raise ConfigError(src, f"{where}.pooling", f"is {shown(_get(t, 'pooling'))}; allowed: {', '.join(POOLINGS)}")
    pool = _poolings(t, features, pooling_factors, src, where)
    total = sum(pool)
    if total > _POOL.hi:
        raise ConfigError(src, f"{where}.pooling_factor", f"adds up to {total:g} lookups per sample over the "
                          f"table's features; at most {_POOL.hi:g}")
    return Table(name=name, rows=rows, dim=dim, features=features, pooling=pool, data_type=dtype,
                 sequence=pooling == "NONE", where=where.split(" (")[0])


def read_tables(tables: Any, pooling_factors: Any = None, src: str = "") -> list[Table]:
    """Every table of a list (EmbeddingBagConfigs, dicts, CSV rows) or of a CSV file, checked one by
    one and together: names distinct, no feature on two tables, every pooling factor used."""
    if isinstance(tables, (str, Path)):
        src, tables = str(tables), read_tables_csv(tables)
        rows = [(f"row {line}", t) for line, t in tables]
    else:
        if isinstance(tables, Mapping) or not hasattr(tables, "__iter__"):
            raise ConfigError(src, "tables", "must be a list of tables (EmbeddingBagConfigs or dicts) or a CSV path, "
                              f"got {type(tables).__name__}")
        rows = [(f"tables[{i}]", t) for i, t in enumerate(tables)]
    if not rows:
        raise ConfigError(src, "tables", "is empty; give at least one table")
    if len(rows) > MAX_TABLES:
        raise ConfigError(src, "tables", f"has {len(rows):,} tables; a model has at most {MAX_TABLES:,}")
    if pooling_factors is not None and not isinstance(pooling_factors, Mapping):
        _number(pooling_factors, "", "pooling_factors")
    out, names, owner = [], {}, {}
    for where, t in rows:
        tb = read_table(t, pooling_factors, src, where)
        if tb.name in names:
            raise ConfigError(src, f"{where}.name", f"table {tb.name!r} is also {names[tb.name]}; names must be distinct")
        names[tb.name] = where
        for f in tb.features:
            if f in owner:
                raise ConfigError(src, f"{where} ({tb.name!r}).feature_names", f"feature {f!r} is also on table {owner[f]!r}; "
                                  "a feature reads one table")
            owner[f] = tb.name
        out.append(tb)
    if isinstance(pooling_factors, Mapping):
        unknown = [f for f in pooling_factors if f not in owner]
        if unknown:
            raise ConfigError("", f"pooling_factors[{unknown[0]!r}]", "is not a feature of any table (features: "
                              f"{', '.join(list(owner)[:20])}{', ...' if len(owner) > 20 else ''})")
    return out


def read_tables_csv(path: str | Path) -> list[tuple[int, dict]]:
    """The rows of a CSV of tables with their line numbers; header: CSV_COLUMNS (the first four required)."""
    p = Path(path)
    try:
        return _rows(p, read_text(p, "CSV of tables"))
    except csv.Error as err:        # a cell over csv's field size limit, a NUL byte
        raise csv_error(p, err) from None


def _rows(p: Path, text: str) -> list[tuple[int, dict]]:
    reader = csv.DictReader(text.splitlines())
    header = [h.strip() for h in reader.fieldnames or []]
    missing = [c for c in CSV_REQUIRED if c not in header]
    if missing:
        raise ConfigError(str(p), "header", f"lacks column {missing[0]!r}; columns: {', '.join(CSV_REQUIRED)} "
                          f"(required), {', '.join(CSV_COLUMNS[4:])} (optional)")
    unknown = [h for h in header if h not in CSV_COLUMNS]
    if unknown:
        raise ConfigError(str(p), "header", f"column {unknown[0]!r} is not a table field (known: {', '.join(CSV_COLUMNS)})")
    reader.fieldnames = header
    out = []
    for row in reader:
        line = reader.line_num
        if None in row:
            raise ConfigError(str(p), f"row {line}", f"has more cells than the header's {len(header)} columns")
        if all((v or "").strip() == "" for v in row.values()):
            continue
        out.append((line, {k: (v or "").strip() for k, v in row.items()}))
    return out


# --------------------------------------------------------------------------------- the dense part

def _dense_layers(layers: list[dict], tables: list[Table], preset_dims: list[float], src: str) -> list[dict]:
    """The preset's layers with the widths that depend on the tables recomputed (module docstring)."""
    layers = [{k: list(v) if isinstance(v, list) else v for k, v in layer.items()} for layer in layers]
    bottom = [i for i, layer in enumerate(layers) if layer.get("stage") == "bottom"]
    top = [i for i, layer in enumerate(layers) if layer.get("stage") != "bottom"]
    dims = sorted({t.dim for t in tables})
    one_dim = dims[0] if len(dims) == 1 else None
    where = lambda i: f"dense.layers[{i}] ({layers[i].get('name', layers[i].get('kind'))!r})"
    seq = [t.name for t in tables if t.sequence]
    for i, layer in enumerate(layers):
        if layer.get("kind") in ("transformer", "hstu"):
            raise ConfigError(src, where(i), f"is a {layer['kind']} layer, whose sizes do not follow from the "
                              "tables; give the dense layers explicitly (dense=[{...}, ...])")
    if seq and top:
        raise ConfigError(src, where(top[0]), f"takes pooled features; table {seq[0]!r} is an unpooled sequence "
                          "feature (pooling NONE): give the dense layers explicitly")
    bottom_out = 0.0
    if bottom:
        last = layers[bottom[-1]]
        if last.get("kind") == "mlp" and one_dim is not None and len(set(preset_dims)) == 1 \
                and last["widths"][-1] == preset_dims[0]:
            last["widths"] = [*last["widths"][:-1], one_dim]     # DLRM: the bottom MLP ends at the embedding dim
        bottom_out = layer_output_width(last["kind"], last)
    pooled = sum(len(t.features) * t.dim for t in tables)
    n_vectors = sum(len(t.features) for t in tables) + (1 if bottom else 0)
    prev = None
    for n, i in enumerate(top):
        layer, kind = layers[i], layers[i].get("kind")
        if n == 0 and kind == "dot":
            if one_dim is None or (bottom and bottom_out != one_dim):
                raise ConfigError(src, where(i), "is a dot interaction, which needs one dim for every table and the "
                                  f"bottom output (dims {', '.join(map(str, dims))}, bottom output {bottom_out:g})")
            layer.update(features=n_vectors, dim=one_dim)
        elif n == 0 and kind in ("dcnv2", "mlp"):
            layer["width" if kind == "dcnv2" else "input"] = int(pooled + bottom_out)
        elif kind == "dcnv2":
            layer["width"] = int(prev)
        elif kind == "mlp":
            layer["input"] = int(prev)
        else:
            raise ConfigError(src, where(i), f"is a {kind} layer after the interaction; give the dense layers explicitly")
        prev = layer_output_width(kind, layer)
    return layers


# ---------------------------------------------------------------------------------------- building

def model_dict(tables: list[Table], dense: Any = "dlrm-dcnv2-mlperf", global_batch: int | None = None,
               name: str | None = None, src: str = "") -> tuple[dict, str]:
    """The model file (as a dict) of `tables` with `dense`'s dense part; and where its settings came from."""
    if isinstance(dense, (str, Path)):
        path = locate("models", dense)
        base = read_file(path)
        emb = base.get("embeddings", {})
        preset_dims = emb.get("dim", [])
        preset_dims = preset_dims if isinstance(preset_dims, list) else [preset_dims]
        layers = _dense_layers(base.get("dense", {}).get("layers", []), tables, preset_dims, str(path))
        origin = Path(dense).stem if Path(dense).suffix else str(dense)
    elif isinstance(dense, (list, tuple)) and all(isinstance(x, Mapping) for x in dense):
        base = read_file(locate("models", "dlrm-dcnv2-mlperf"))
        emb, layers, origin = base["embeddings"], [dict(x) for x in dense], None
    else:
        raise ConfigError("", "dense", "must be a model preset name or file whose dense part is reused, or a list "
                          f"of layer dicts (as [[dense.layers]] in a model file), got {type(dense).__name__}")
    bpe = [DATA_TYPES[t.data_type] for t in tables]
    data = {
        "name": name or "tables",
        "description": f"{len(tables)} tables{f' from {Path(src).name}' if src else ''}, "
                       f"dense part of {origin or 'explicit layers'}",
        "global_batch": global_batch if global_batch is not None else base.get("global_batch"),
        **{k: base[k] for k in ("dense_dtype", "param_bytes", "activation_bytes", "dense_optimizer") if k in base},
        "embeddings": {
            "bytes_per_element": bpe[0] if len(set(bpe)) == 1 else bpe,
            "optimizer": emb.get("optimizer"), "index_bytes": emb.get("index_bytes"),
            "names": [t.name for t in tables],
            "rows": [t.rows for t in tables],
            "dim": [t.dim for t in tables],
            "pooling": [_plain(sum(t.pooling)) for t in tables],
            "features": [list(t.features) for t in tables],
        },
        "dense": {"layers": layers},
    }
    if any(t.sequence for t in tables):
        data["embeddings"]["sequence"] = [t.sequence for t in tables]
    return data, origin or "dlrm-dcnv2-mlperf's settings, explicit layers"


def _plain(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def model_from_tables(tables: Any, *, pooling_factors: Any = None, dense: Any = "dlrm-dcnv2-mlperf",
                      global_batch: int | None = None, name: str | None = None) -> RankingModel:
    """A RankingModel of TorchRec-style tables (module docstring).

    tables: EmbeddingBagConfigs, dicts or CSV rows (name, num_embeddings, embedding_dim,
      feature_names; optional pooling_factor, data_type, pooling), or the path of a CSV of them.
    pooling_factors: {feature name: mean lookups per sample}, or one number for every feature
      without its own; a table's pooling_factor takes precedence and may not be given twice.
    dense: a model preset (name or file) whose dense part and settings are reused, widths
      following the tables; or a list of layer dicts taken as they are (the other settings then
      those of dlrm-dcnv2-mlperf).
    global_batch: samples per step (default: the preset's).
    """
    src = str(tables) if isinstance(tables, (str, Path)) else ""
    data, _ = model_dict(read_tables(tables, pooling_factors, src), dense, global_batch, name, src)
    return parse_model(data, src or "model_from_tables")


# ------------------------------------------------------------------------------------ writing

def model_file_text(data: dict, tables: list[Table], src: str, origin: str, command: str,
                    batch_given: bool = False, preset_layers: list[dict] = ()) -> str:
    """A model file holding `data` (model_dict's), a source comment on every table and setting;
    a layer size that differs from `preset_layers`' says it follows the tables."""
    v = json.dumps          # a JSON scalar or list of them is a TOML value
    emb = data["embeddings"]
    out = [f"# Built by `{command}`:", f"# the tables from {src} (one source line per table: its CSV row), the dense part",
           f"# and the other settings from the model preset {origin}, the layer sizes that depend on the",
           "# tables recomputed from them (perfmodel/interop/tables.py).", "",
           f"name = {v(data['name'])}", f"description = {v(data['description'])}"]
    for key in ("global_batch", "dense_dtype", "param_bytes", "activation_bytes", "dense_optimizer"):
        if key in data:
            why = "given to import-tables" if key == "global_batch" and batch_given else f"from {origin}"
            out.append(f"{key} = {v(data[key])}".ljust(36) + f"# source: {why}")
    out += ["", "[embeddings]"]
    bpe = emb["bytes_per_element"]
    out.append(f"bytes_per_element = {v(bpe)}".ljust(36) + f"# source: {src} data_type (FP32 where not given)")
    for key in ("optimizer", "index_bytes"):
        out.append(f"{key} = {v(emb[key])}".ljust(36) + f"# source: {origin}")
    out.append("names = [")
    for t in tables:
        feats = ", ".join(f"{f} {_plain(p):g}" for f, p in zip(t.features, t.pooling))
        out.append(f"    {v(t.name)},".ljust(36) + f"# source: {src} {t.where} (features and lookups: {feats})")
    out.append("]")
    for key, what in (("rows", "num_embeddings"), ("dim", "embedding_dim"),
                      ("pooling", "pooling_factor, summed over each table's features"),
                      ("features", "feature_names"), ("sequence", "pooling NONE")):
        if key in emb:
            out.append(f"{key} = {v(emb[key])}  # source: {src} {what}, in the order of names")
    for i, layer in enumerate(data["dense"]["layers"]):
        out += ["", "[[dense.layers]]"]
        before = preset_layers[i] if i < len(preset_layers) else layer
        for key, value in layer.items():
            out.append(f"{key} = {v(value)}".ljust(36) + f"# source: {origin}" + (
                f", {v(before.get(key))} there; follows the tables" if before.get(key) != value else ""))
    return "\n".join(out) + "\n"


def import_tables(csv_path: str | Path, out: str | Path, *, dense: Any = "dlrm-dcnv2-mlperf",
                  global_batch: int | None = None, name: str | None = None, pooling_factors: Any = None,
                  command: str | None = None) -> RankingModel:
    """Write the model of a CSV of tables to `out` (a new .toml file; never overwritten) and return it."""
    from ..files import check_output, write_new
    check_output(out, (".toml",), "model TOML")
    tables = read_tables(csv_path, pooling_factors)
    data, origin = model_dict(tables, dense, global_batch, name or Path(csv_path).stem, str(csv_path))
    model = parse_model(data, str(csv_path))          # every check before anything is written
    command = command or f"perfmodel import-tables {csv_path} --dense {dense} --out {out}"
    preset = read_file(locate("models", dense)).get("dense", {}).get("layers", []) if isinstance(dense, (str, Path)) else []
    write_new(out, model_file_text(data, tables, str(csv_path), origin, command, global_batch is not None, preset))
    return model
