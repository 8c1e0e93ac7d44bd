"""The reference step's description of a model (Spec), read from the same config the cost model
reads, and the cost model of the same model (cost_model)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ..config import ConfigError, read_file
from ..presets import locate
from ..workload import RankingModel, parse_model

INDEX_DTYPE = jnp.int32
INDEX_BYTES = 4                       # the reference's indices are int32 (jax without x64)
DTYPES = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp8": jnp.float8_e4m3fn}
ELEMENT_DTYPES = {4.0: jnp.float32, 2.0: jnp.bfloat16}
SUPPORTED_TYPES = ("data_parallel", "table_wise", "column_wise", "row_wise")


@dataclass(frozen=True)
class Layer:
    kind: str                          # "mlp" | "dot" | "dcnv2"
    name: str
    stage: str                         # "bottom" | "top"
    widths: tuple[int, ...] = ()       # mlp: input then outputs; dcnv2: (width,)
    layers: int = 0                    # dcnv2 cross layers
    rank: int = 0                      # dcnv2 low rank


@dataclass(frozen=True)
class Spec:
    """Everything the reference step needs, as static Python values (hashable: jit-static)."""

    name: str
    tables: tuple[str, ...]
    rows: tuple[int, ...]
    dim: int
    pooling: tuple[int, ...]
    layers: tuple[Layer, ...]
    global_batch: int
    dense_in: int
    dense_dtype: str = "fp32"
    emb_dtype: str = "fp32"
    emb_optimizer: str = "rowwise_adagrad"
    dense_optimizer: str = "adagrad"
    lr: float = 0.01
    eps: float = 1e-8

    @property
    def T(self) -> int:
        return len(self.tables)

    def with_batch(self, batch: int) -> "Spec":
        return replace(self, global_batch=int(batch))


# ------------------------------------------------------------------------------------ building

def load_spec(name_or_path: str | Path, *, batch: int | None = None, max_rows: int | None = None) -> Spec:
    """The reference spec of a model preset or model file (checked by the model loader first).

    batch overrides the global batch; max_rows caps every table's rows (a scaled-down model whose
    FLOPs and communication volumes do not depend on rows).
    """
    path = locate("models", name_or_path)
    data = read_file(path)
    return spec_from_dict(data, str(path), batch=batch, max_rows=max_rows)


def spec_from_dict(data: dict, src: str = "model", *, batch: int | None = None,
                   max_rows: int | None = None) -> Spec:
    """Build a Spec from a model config dict (the TOML layout of data/models)."""
    model = parse_model(data, src)            # every field checked, one clear error per problem
    tb = model.tables
    if float(np.max(np.asarray(tb.sequence))) > 0:
        raise ConfigError(src, "embeddings.sequence", "the reference step supports pooled features only")
    if float(np.max(np.asarray(tb.features))) > 1:
        raise ConfigError(src, "embeddings.features", "the reference step reads each table with one feature")
    dims = np.asarray(tb.dim).astype(int)
    if len(set(dims.tolist())) != 1:
        raise ConfigError(src, "embeddings.dim", "the reference step needs one embedding dim for every table "
                          "(the interaction stacks them)")
    pool = np.asarray(tb.pooling, np.float64)
    if np.any(np.abs(pool - np.round(pool)) > 1e-6):
        raise ConfigError(src, "embeddings.pooling", "the reference step needs whole lookups per sample (fixed bags)")
    d, T = int(dims[0]), tb.count
    rows = [int(r) for r in np.asarray(tb.rows, np.float64)]
    if max_rows is not None:
        rows = [min(r, int(max_rows)) for r in rows]
    bpes = set(np.asarray(tb.bytes_per_element, np.float64).ravel().tolist())
    bpe = bpes.pop()
    if bpes or bpe not in ELEMENT_DTYPES:
        raise ConfigError(src, "embeddings.bytes_per_element", "the reference step stores every table in fp32 (4) or every table in bf16 (2)")
    layers = _layers(data, src, T, d)
    opt = data["embeddings"].get("optimizer", "rowwise_adagrad")
    return Spec(name=model.name, tables=tb.names, rows=tuple(rows), dim=d,
                pooling=tuple(int(round(p)) for p in pool), layers=layers,
                global_batch=int(batch if batch is not None else float(model.global_batch)),
                dense_in=layers[0].widths[0], dense_dtype=model.dense_dtype,
                emb_dtype="fp32" if bpe == 4.0 else "bf16", emb_optimizer=opt,
                dense_optimizer=data.get("dense_optimizer", "adagrad"))


def _layers(data: dict, src: str, T: int, d: int) -> tuple[Layer, ...]:
    out = []
    for i, raw in enumerate(data["dense"]["layers"]):
        kind, stage = raw["kind"], raw["stage"]
        name = raw.get("name", f"{kind}{i}")
        where = f"dense.layers[{i}]"
        if kind == "mlp":
            out.append(Layer("mlp", name, stage, (int(raw["input"]), *(int(w) for w in raw["widths"]))))
        elif kind == "dot":
            if int(raw["features"]) != T + 1 or int(raw["dim"]) != d:
                raise ConfigError(src, where, f"the dot interaction of {T} tables needs features = {T + 1} and dim = {d}")
            out.append(Layer("dot", name, stage, (T + 1, d)))
        elif kind == "dcnv2":
            if int(raw["width"]) != (T + 1) * d:
                raise ConfigError(src, where + ".width", f"DCNv2 on {T} tables of dim {d} is {(T + 1) * d} wide")
            out.append(Layer("dcnv2", name, stage, (int(raw["width"]),), int(raw["layers"]), int(raw["low_rank"])))
        else:
            raise ConfigError(src, where + ".kind", f"the reference step builds mlp, dot and dcnv2 layers, not {kind!r}")
    bottom = [l for l in out if l.stage == "bottom"]
    top = [l for l in out if l.stage == "top"]
    if not bottom or any(l.kind != "mlp" for l in bottom):
        raise ConfigError(src, "dense.layers", "the reference step needs a bottom stage of mlp layers")
    if not top or top[0].kind not in ("dot", "dcnv2") or any(l.kind != "mlp" for l in top[1:]):
        raise ConfigError(src, "dense.layers", "the reference step needs a top stage: an interaction, then mlp layers")
    if bottom[-1].widths[-1] != d:
        raise ConfigError(src, "dense.layers", f"the bottom MLP must end at the embedding dim {d}")
    width = _interaction_width(top[0], T, d)
    for l in top[1:]:
        if l.widths[0] != width:
            raise ConfigError(src, "dense.layers", f"layer {l.name!r} takes {l.widths[0]} inputs; the previous layer gives {width}")
        width = l.widths[-1]
    if width != 1:
        raise ConfigError(src, "dense.layers", "the last top layer must output one logit")
    for a, b in zip(bottom[:-1], bottom[1:]):
        if b.widths[0] != a.widths[-1]:
            raise ConfigError(src, "dense.layers", f"layer {b.name!r} takes {b.widths[0]} inputs; the previous layer gives {a.widths[-1]}")
    return tuple(bottom + top)


def _interaction_width(layer: Layer, T: int, d: int) -> int:
    F = T + 1
    return F * (F - 1) // 2 + d if layer.kind == "dot" else layer.widths[0]


def model_dict(spec: Spec, *, index_bytes: float = INDEX_BYTES, param_bytes: float = 4.0) -> dict:
    """The model config (data/models layout) of a spec, so the cost model sees the same model."""
    layers = []
    for l in spec.layers:
        if l.kind == "mlp":
            layers.append(dict(kind="mlp", name=l.name, stage=l.stage, input=l.widths[0], widths=list(l.widths[1:])))
        elif l.kind == "dot":
            layers.append(dict(kind="dot", name=l.name, stage=l.stage, features=l.widths[0], dim=l.widths[1]))
        else:
            layers.append(dict(kind="dcnv2", name=l.name, stage=l.stage, width=l.widths[0], layers=l.layers,
                               low_rank=l.rank))
    act = {"fp32": 4, "bf16": 2, "fp8": 1}[spec.dense_dtype]
    return dict(name=spec.name, global_batch=spec.global_batch, dense_dtype=spec.dense_dtype,
                param_bytes=param_bytes, activation_bytes=act, dense_optimizer=spec.dense_optimizer,
                embeddings=dict(dim=spec.dim, bytes_per_element=4 if spec.emb_dtype == "fp32" else 2,
                                optimizer=spec.emb_optimizer, index_bytes=index_bytes, names=list(spec.tables),
                                rows=list(spec.rows), pooling=list(spec.pooling)),
                dense=dict(layers=layers))


def cost_model(spec: Spec, **kw) -> RankingModel:
    """The perfmodel RankingModel of exactly this reference spec (int32 indices, fp32 master weights)."""
    return parse_model(model_dict(spec, **kw), f"reference spec {spec.name}")


