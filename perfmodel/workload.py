"""Workload: embedding tables (a struct of arrays over T tables) and the dense part as GEMMs.

The dense layers (MLP, dot interaction, DCNv2 low-rank cross, transformer, HSTU block) are
lowered at load time to a static list of GEMMs per sample, each (rows m, n, k): forward FLOPs
2·B·m·n·k, weights n·k where the GEMM has weights. Layer structure is static; every size is an
array leaf, so costs are differentiable with respect to the workload as well.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .config import ConfigError, Section, preset_names, read_file
from .presets import locate
from .pytree import pytree, static
from .schema import DENSE_OPTIMIZER_NAMES, EMB_OPTIMIZERS, LAYER_KINDS, MAX_GEMMS, MAX_TABLES, MODEL, STAGES, reader  # noqa: F401

SHARD_DTYPES = {"fp32": 4.0, "bf16": 2.0, "fp8": 1.0}
DENSE_OPTIMIZERS = dict(zip(DENSE_OPTIMIZER_NAMES, (0.0, 1.0, 2.0)))   # state values per parameter


@pytree
@dataclass(frozen=True)
class EmbeddingTables:
    """T embedding tables as arrays of length T."""

    rows: jax.Array
    dim: jax.Array
    pooling: jax.Array               # mean lookups per sample
    access_skew: jax.Array           # legacy: HBM cache hit rate = cache_ratio ** access_skew (1 = uniform)
    access_zipf: jax.Array           # Zipf exponent of the ids (0 = uniform); cost/access.py
    access_distinct_rows: jax.Array  # rows ever accessed, the ids the Zipf law ranks (<= rows)
    access_multi_hot: jax.Array      # each drawn id expands to itself + (k - 1) fixed uniform rows
    access_top_frac: jax.Array       # [T, M] fractions of the distinct rows of the top-share curve
    access_top_share: jax.Array      # [T, M] share of lookups they take (where access_top_known)
    access_top_known: jax.Array      # [T] 1.0 where the file gives the table a top-share curve
    sequence: jax.Array              # 1.0: unpooled (jagged) feature, output pooling x dim per sample
    opt_bytes_per_row: jax.Array     # optimizer state per row, per shard (row-wise Adagrad: 4 B)
    opt_bytes_per_element: jax.Array # optimizer state per element (Adam: 2 x fp32 = 8 B)
    bytes_per_element: jax.Array
    index_bytes: jax.Array
    features: jax.Array              # features reading the table (TorchRec's feature_names); their lookups add up in pooling
    names: tuple[str, ...] = static(default=())
    feature_names: tuple[tuple[str, ...], ...] = static(default=())   # per table; () where the file names none

    @property
    def count(self) -> int:
        return len(self.names)

    def bytes_per_row(self) -> jax.Array:
        """Weights plus optimizer state of one full row, in bytes."""
        return self.dim * (self.bytes_per_element + self.opt_bytes_per_element) + self.opt_bytes_per_row

    def output_per_sample(self) -> jax.Array:
        """Embedding vectors each table returns per sample: one per feature (pooled), or one per
        lookup (sequence): features + sequence (pooling - features)."""
        return self.features + self.sequence * (self.pooling - self.features)


@pytree
@dataclass(frozen=True)
class Dense:
    """The dense network lowered to G GEMMs per sample, plus elementwise traffic per stage."""

    m: jax.Array                     # rows per sample of each GEMM
    n: jax.Array
    k: jax.Array
    weighted: jax.Array              # 1.0 where the GEMM multiplies a weight matrix (params n·k)
    bias: jax.Array                  # bias parameters attached to the GEMM
    elementwise: jax.Array           # elements read+written per sample after each GEMM (activations, adds)
    bottom: tuple[bool, ...] = static(default=())     # GEMM belongs to the bottom stage
    layer: tuple[str, ...] = static(default=())       # layer name of each GEMM

    def params(self) -> jax.Array:
        return (self.weighted * self.n * self.k + self.bias).sum()      # (numpy or jax arrays alike)

    def flops_per_sample(self) -> jax.Array:
        """Forward FLOPs per sample, per GEMM: 2 m n k."""
        return 2.0 * self.m * self.n * self.k


@pytree
@dataclass(frozen=True)
class RankingModel:
    tables: EmbeddingTables
    dense: Dense
    global_batch: jax.Array
    param_bytes: jax.Array
    activation_bytes: jax.Array
    dense_opt_values: jax.Array      # optimizer state values per dense parameter
    dense_dtype: str = static(default="bf16")
    name: str = static(default="model")
    file: str = static(default="")        # the file it was loaded from ("" when built otherwise)


# ------------------------------------------------------------------------------ layer lowering

def lower_layer(kind: str, p: dict) -> list[tuple[float, float, float, bool, float]]:
    """GEMMs (m, n, k, weighted, bias) per sample of one layer; see the module docstring."""
    if kind == "mlp":
        w = [p["input"], *p["widths"]]
        return [(1, b, a, True, b) for a, b in zip(w[:-1], w[1:])]
    if kind == "dot":
        f, d = p["features"], p["dim"]
        return [(f, f, d, False, 0)]                  # pairwise dots: X X^T per sample
    if kind == "dcnv2":
        w, r = p["width"], p["low_rank"]
        return [g for _ in range(int(p["layers"])) for g in ((1, r, w, True, 0), (1, w, r, True, w))]
    if kind == "transformer":
        s, d, ffn = p["seq_len"], p["d_model"], p["ffn"]
        block = [(s, 3 * d, d, True, 0), (s, s, d, False, 0), (s, d, s, False, 0),
                 (s, d, d, True, 0), (s, ffn, d, True, 0), (s, d, ffn, True, 0)]
        return block * int(p["layers"])
    if kind == "hstu":  # HSTU (Zhai et al., ICML 2024): U,V,Q,K projections, pointwise attention, out
        s, d = p["seq_len"], p["d_model"]
        block = [(s, 4 * d, d, True, 0), (s, s, d, False, 0), (s, d, s, False, 0), (s, d, d, True, 0)]
        return block * int(p["layers"])
    raise ValueError(kind)


def layer_output_width(kind: str, p: dict) -> float:
    if kind == "mlp":
        return p["widths"][-1]
    if kind == "dot":
        return p["features"] * (p["features"] - 1) / 2 + p["dim"]
    if kind == "dcnv2":
        return p["width"]
    return p["seq_len"] * p["d_model"]


_LAYER_FIELDS = {
    "mlp": ("input", "widths"), "dot": ("features", "dim"), "dcnv2": ("width", "layers", "low_rank"),
    "transformer": ("seq_len", "d_model", "heads", "ffn", "layers"),
    "hstu": ("seq_len", "d_model", "heads", "layers"),
}


# --------------------------------------------------------------------------------------- loading

def load_model(name_or_path: str | Path) -> RankingModel:
    """Load a model preset by name (`dlrm-dcnv2-mlperf`) or from a TOML/JSON file."""
    path = locate("models", name_or_path)
    return parse_model(read_file(path), str(path))


def model_names() -> list[str]:
    return preset_names("models")


def parse_model(data: dict, src: str) -> RankingModel:
    top = Section(data, src)
    num = reader(top, MODEL, "")
    name = top.text("name")
    top.text("description", default="")
    batch = num("global_batch")
    dtype = top.text("dense_dtype", tuple(SHARD_DTYPES))
    pbytes, abytes = num("param_bytes"), num("activation_bytes")
    dopt = top.text("dense_optimizer", tuple(DENSE_OPTIMIZERS))
    tables = _parse_tables(top.sub("embeddings"), src)
    dense, layers = _parse_dense(top.sub("dense"), src)
    _check_widths(layers, tables, src)
    if top.has("constraints"):      # checked here; search reads them (constraints.model_constraints)
        from .constraints import check_tables, parse_constraints
        check_tables(parse_constraints(top.raw("constraints"), src, "constraints."), tables, "constraints.")
    top.finish()
    f = lambda x: jnp.asarray(x, jnp.float32)
    return RankingModel(tables=tables, dense=dense, global_batch=f(batch), param_bytes=f(pbytes),
                        activation_bytes=f(abytes), dense_opt_values=f(DENSE_OPTIMIZERS[dopt]),
                        dense_dtype=dtype, name=name, file=src)


def _synthetic(s: Section, src: str) -> dict:
    """The tables [embeddings.synthetic] draws (generator.synthetic_embeddings), sized and checked:
    num_tables at most MAX_TABLES before anything is drawn, every drawn table within the schema."""
    from . import generator
    syn = s.sub("synthetic")
    for key in ("rows", "pooling", "dim", "names", "access_skew", "sequence", "access_multi_hot", *_DISTRIBUTION):
        if s.has(key):
            raise s.error(key, "must not be given together with [embeddings.synthetic]")
    kwargs = dict(syn.data)
    syn._seen.update(kwargs)
    count = kwargs.get("num_tables")
    if isinstance(count, int) and not isinstance(count, bool) and count > MAX_TABLES:
        raise ConfigError(src, "embeddings.synthetic.num_tables", f"is {count:,}; a model has at most "
                          f"{MAX_TABLES:,} tables")
    try:
        gen = generator.synthetic_embeddings(**kwargs)
    except (TypeError, ValueError, OverflowError) as err:
        raise ConfigError(src, "embeddings.synthetic", str(err)) from None
    for key in ("rows", "dim", "pooling", "access_skew"):
        spec = MODEL[f"embeddings.{key}"]
        bad = [i for i, v in enumerate(gen[key]) if not spec.lo <= v <= spec.hi]
        if bad:
            raise ConfigError(src, "embeddings.synthetic", f"draws a table {key} of {gen[key][bad[0]]:g} "
                              f"(table {bad[0]}); each must be {spec.allowed()}")
    return gen


def _parse_tables(s: Section, src: str) -> EmbeddingTables:
    num = reader(s, MODEL, "embeddings")
    opt = s.text("optimizer", EMB_OPTIMIZERS)
    idx = num("index_bytes")
    if s.has("synthetic"):
        gen = _synthetic(s, src)
        rows, dim, pool = gen["rows"], gen["dim"], gen["pooling"]
        skew, seq, names = gen["access_skew"], [0.0] * len(rows), list(gen["names"])
        dist = _uniform_access(rows)
    else:
        nums = lambda key, *a, **kw: s.nums(MODEL[f"embeddings.{key}"].num(**kw), *a)
        rows = s.nums(MODEL["embeddings.rows"].num(), most=MAX_TABLES)
        t = len(rows)
        if t == 0:
            raise s.error("rows", "must list at least one table")
        pool = nums("pooling", t)
        dim = nums("dim", t)
        skew = nums("access_skew", t)
        dist = _access(s, rows, src)
        seq_raw = s.raw("sequence", [False] * t)
        if not isinstance(seq_raw, list) or len(seq_raw) != t or not all(isinstance(b, bool) for b in seq_raw):
            raise s.error("sequence", f"must be a list of {t} true/false values")
        seq = [1.0 if b else 0.0 for b in seq_raw]
        names = s.raw("names", [f"t{i}" for i in range(t)])
        if not isinstance(names, list) or len(names) != t or len(set(map(str, names))) != t:
            raise s.error("names", f"must be a list of {t} distinct names")
    t = len(rows)
    # one width for every table (a scalar leaf, as knobs set it), or one per table
    bpe = (s.nums(MODEL["embeddings.bytes_per_element"].num(), t) if isinstance(s.data.get("bytes_per_element"), list)
           else num("bytes_per_element"))
    features = _feature_names(s, t)
    s.finish()
    opt_row, opt_elem = {"sgd": (0.0, 0.0), "rowwise_adagrad": (4.0, 0.0), "adam": (0.0, 8.0)}[opt]
    f = lambda x: jnp.asarray(x, jnp.float32)
    zipf, distinct, multi, frac, share, known = dist
    return EmbeddingTables(rows=f(rows), dim=f(dim), pooling=f(pool), access_skew=f(skew), access_zipf=f(zipf),
                           access_distinct_rows=f(distinct), access_multi_hot=f(multi),
                           access_top_frac=f(frac), access_top_share=f(share), access_top_known=f(known),
                           sequence=f(seq),
                           opt_bytes_per_row=f(opt_row + 0.0 * np.asarray(dim)),
                           opt_bytes_per_element=f(opt_elem), bytes_per_element=f(bpe), index_bytes=f(idx),
                           features=f([max(len(fs), 1) for fs in features]), names=tuple(str(n) for n in names),
                           feature_names=features)


def _uniform_access(rows: list) -> tuple:
    """The defaults: uniform access over all rows, no expansion, no curve."""
    t = len(rows)
    return [0.0] * t, list(rows), [1.0] * t, np.zeros((t, 0)), np.zeros((t, 0)), [0.0] * t


_DISTRIBUTION = ("access_zipf", "access_distinct_rows", "access_top_fractions", "access_top_share")


def _access(s: Section, rows: list, src: str) -> tuple:
    """[embeddings] access_*: each table's access distribution (cost/access.py), checked: a Zipf
    exponent, the rows ever accessed (1 to the table's rows), the multi-hot expansion, and an optional
    top-share curve (fractions increasing in (0, 1]; per table [] or one share per fraction,
    non-decreasing in [0, 1]). access_skew, the legacy rule, is not given with a distribution."""
    t = len(rows)
    zipf, distinct, multi, frac, share, known = _uniform_access(rows)
    given = [key for key in _DISTRIBUTION if s.has(key)]
    if given and s.has("access_skew"):
        raise s.error("access_skew", f"must not be given together with {given[0]}: access_skew is the legacy rule "
                      "(cache hit rate = cache_ratio ** access_skew); give the distribution alone")
    if s.has("access_zipf"):
        zipf = s.nums(MODEL["embeddings.access_zipf"].num(), t)
    if s.has("access_distinct_rows"):
        distinct = s.nums(MODEL["embeddings.access_distinct_rows"].num(), t)
        for i, (d, r) in enumerate(zip(distinct, rows)):
            if d > r:
                raise s.error(f"access_distinct_rows[{i}]", f"is {d:,.0f}, more than the table's {r:,.0f} rows; "
                              "must be an integer >= 1 and <= rows")
    if s.has("access_multi_hot"):
        multi = s.nums(MODEL["embeddings.access_multi_hot"].num(), t)
    if s.has("access_top_fractions") or s.has("access_top_share"):
        if not s.has("access_top_fractions"):
            raise s.error("access_top_fractions", "is missing; access_top_share needs the fractions of the distinct "
                          "rows its shares are at")
        spec = MODEL["embeddings.access_top_fractions"]
        fr = s.nums(spec.num(), most=1000)
        if not fr or any(a >= b for a, b in zip(fr, fr[1:])):
            raise s.error("access_top_fractions", f"must be a non-empty list of fractions of the distinct rows, "
                          f"increasing, each {spec.allowed()}, got {s.data['access_top_fractions']!r}")
        sh = s.raw("access_top_share", None) if s.has("access_top_share") else None
        m = len(fr)
        if not isinstance(sh, list) or len(sh) != t:
            raise s.error("access_top_share", f"must be a list of {t} lists (one per table): [] where the curve is "
                          f"unknown, else {m} shares (one per access_top_fractions entry); got {sh!r}")
        frac, share, known = np.tile(np.asarray(fr, np.float64), (t, 1)), np.zeros((t, m)), [0.0] * t
        for i, row in enumerate(sh):
            good = isinstance(row, list) and len(row) in (0, m) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0.0 <= v <= 1.0 for v in row) and all(
                a <= b for a, b in zip(row, row[1:]))
            if not good:
                raise s.error(f"access_top_share[{i}]", f"must be [] (unknown) or {m} shares of the lookups, one per "
                              "access_top_fractions entry, each >= 0 and <= 1 and non-decreasing (a larger top "
                              f"takes at least as much), got {row!r}")
            if row:
                share[i], known[i] = row, 1.0
    return zipf, distinct, multi, frac, share, known


def _feature_names(s: Section, t: int) -> tuple[tuple[str, ...], ...]:
    """[embeddings] features: per table, the names of the features that read it (several features
    on one table each return their own pooled vector); optional, one feature per table by default."""
    raw = s.raw("features", [])
    if raw == []:
        return ((),) * t
    ok = isinstance(raw, list) and len(raw) == t and all(
        isinstance(fs, list) and fs and all(isinstance(x, str) and x for x in fs) for fs in raw)
    if not ok:
        raise s.error("features", f"must be a list of {t} lists (one per table) of feature names, each list non-empty")
    seen: dict[str, int] = {}
    for i, fs in enumerate(raw):          # several features on one table are fine; one feature on two is not
        for x in fs:
            if x in seen and seen[x] != i:
                raise s.error(f"features[{i}]", f"names feature {x!r}, which table {seen[x]} reads already: a feature "
                              "reads one table (give the tables one feature name each)")
            seen[x] = i
    return tuple(tuple(fs) for fs in raw)


def _gemm_count(kind: str, p: dict) -> int:
    """GEMMs lower_layer makes of a layer (counted before any is made)."""
    return {"mlp": lambda: len(p["widths"]), "dot": lambda: 1, "dcnv2": lambda: 2 * int(p["layers"]),
            "transformer": lambda: 6 * int(p["layers"]), "hstu": lambda: 4 * int(p["layers"])}[kind]()


def _parse_dense(s: Section, src: str) -> tuple[Dense, list]:
    """The dense part lowered to GEMMs, and its layers as read: (index, kind, name, stage, sizes)."""
    layers = s.raw("layers")
    s.finish()
    if not isinstance(layers, list) or not layers:
        raise ConfigError(src, "dense.layers", "must be a non-empty list of [[dense.layers]] tables")
    if len(layers) > MAX_GEMMS:
        raise ConfigError(src, "dense.layers", f"has {len(layers):,} layers; at most {MAX_GEMMS:,}")
    gemms, bottom, names, elem, read = [], [], [], [], []
    count = 0
    for i, raw in enumerate(layers):
        ls = Section(raw, src, f"dense.layers[{i}].")
        kind = ls.text("kind", LAYER_KINDS)
        lname = ls.text("name", default=f"{kind}{i}")
        stage = ls.text("stage", STAGES)
        p = {}
        for key in _LAYER_FIELDS[kind]:
            spec = MODEL[f"dense.layers[].{key}"].num()
            if key == "widths":
                p[key] = ls.nums(spec, most=MAX_GEMMS)
                if not p[key]:
                    raise ls.error(key, "must list at least one width")
            else:
                p[key] = ls.num(spec)
        ls.finish()
        if kind == "transformer" or kind == "hstu":
            if p["d_model"] % p["heads"]:
                raise ls.error("heads", f"must divide d_model = {p['d_model']:g}")
        read.append((i, kind, lname, stage, p))
        count += _gemm_count(kind, p)
        if count > MAX_GEMMS:
            raise ConfigError(src, "dense.layers", f"lower to more than {MAX_GEMMS:,} GEMMs (at layer {i}, "
                              f"{lname}); the dense part has at most {MAX_GEMMS:,}")
        for m, n, k, w, b in lower_layer(kind, p):
            gemms.append((m, n, k, 1.0 if w else 0.0, b))
            bottom.append(stage == "bottom")
            names.append(lname)
            elem.append(2.0 * m * n)  # one read + one write of the output per sample (activation / add)
    g = np.asarray(gemms, np.float64)
    f = lambda x: jnp.asarray(x, jnp.float32)
    return Dense(m=f(g[:, 0]), n=f(g[:, 1]), k=f(g[:, 2]), weighted=f(g[:, 3]), bias=f(g[:, 4]),
                 elementwise=f(elem), bottom=tuple(bottom), layer=tuple(names)), read


def _check_widths(layers: list, tables: EmbeddingTables, src: str) -> None:
    """The widths the dense part declares against what feeds it (DLRM's wiring: the bottom stage's
    output and the tables' embeddings meet in the first top layer): a dot interaction takes the
    V vectors the tables return per sample (one per feature when pooled) and the bottom output as
    V + 1 features of the tables' one dim; a DCNv2 cross network takes their concatenation, width =
    bottom output + sum of dim x vectors per sample; an MLP after an MLP, dot or DCNv2 layer of its stage takes that layer's output. A
    transformer or HSTU block reads sequences whose layout the file does not say: not checked."""
    def out(layer) -> float:
        return layer_output_width(layer[1], layer[4])
    name = lambda layer, key: f"dense.layers[{layer[0]}].{key}"
    bottom = [l for l in layers if l[3] == "bottom"]
    top = [l for l in layers if l[3] == "top"]
    first, b_out = (top[0] if top else (0, "", "", "", {})), (out(bottom[-1]) if bottom else 0.0)
    dims = np.asarray(tables.dim, np.float64)
    vectors = np.asarray(tables.output_per_sample(), np.float64)
    emb, V, T = float(np.sum(vectors * dims)), int(round(float(np.sum(vectors)))), len(dims)
    fed = f"the bottom output ({b_out:g}) and the {T} tables' embeddings ({emb:,.0f})" if bottom else \
        f"the {T} tables' embeddings ({emb:,.0f})"
    if first[1] == "dcnv2" and first[4]["width"] != b_out + emb:
        raise ConfigError(src, name(first, "width"), f"is {first[4]['width']:,g}; the cross network takes {fed}: "
                          f"{b_out + emb:,.0f}")
    if first[1] == "dot":
        p, want = first[4], V + (1 if bottom else 0)
        if p["features"] != want:
            raise ConfigError(src, name(first, "features"), f"is {p['features']:g}; the interaction takes the {V} "
                              f"vectors of the {T} tables" + (" and the bottom output" if bottom else "") + f": {want}")
        widths = set(dims.tolist()) | ({b_out} if bottom else set())
        if widths != {p["dim"]}:
            raise ConfigError(src, name(first, "dim"), f"is {p['dim']:g}; the dot interaction needs every vector "
                              f"that wide, but the tables and the bottom output are {', '.join(f'{w:g}' for w in sorted(widths))}")
    for stage in STAGES:
        ls = [l for l in layers if l[3] == stage]
        for prev, nxt in zip(ls, ls[1:]):
            if nxt[1] == "mlp" and prev[1] in ("mlp", "dot", "dcnv2") and nxt[4]["input"] != out(prev):
                raise ConfigError(src, name(nxt, "input"), f"is {nxt[4]['input']:g}; it takes the output of layer "
                                  f"{prev[2]!r}, {out(prev):g} wide")
