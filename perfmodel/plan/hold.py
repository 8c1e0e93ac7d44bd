"""Held settings: the plan-wide settings a user's framework fixes, which a search must keep.

    pm.search(system, model, hold="dense=replicated,overlap_chunks=1,pipeline=off")
    pm.search(system, model, hold={"dense": "replicated", "all_to_all": "direct"})

A framework decides some of a plan's settings for its users: HugeCTR's MLPerf runs keep the dense
layers replicated and send the all-to-all in one piece; a TorchRec job may fix its gradient buckets.
A search that is to say what such a user should do searches with those settings held from its
first round: every plan it scores carries them (Hold.arrays), its setting moves leave them alone,
its masks allow only them (Hold.masks), and the plan it returns has them (Hold.apply).

Keys (each optional): dense (DENSE_MODES), a2a_precision and grad_precision (PRECISIONS), offload
and pipeline (on / off, yes / no, true / false), grad_buckets and overlap_chunks (integers 1 to
1,024), and one algorithm per collective by its name (all_to_all, all_reduce, reduce_scatter,
all_gather; ALLOWED_ALGORITHMS). `hold_all(plan)` holds every setting of a plan (the search's
freeze_settings).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ..config import ConfigError
from .space import ALGORITHMS, ALLOWED_ALGORITHMS, COLLECTIVES, DENSE_MODES, NEG, PRECISIONS, Masks

BOOLS = {"on": True, "yes": True, "true": True, "off": False, "no": False, "false": False}
MAX_COUNT = 1024          # the most gradient buckets or overlap chunks a held setting may name
SCALARS = ("dense", "a2a_precision", "grad_precision", "offload", "pipeline", "grad_buckets", "overlap_chunks")
KEYS = SCALARS + COLLECTIVES
ALLOWED = {"dense": ", ".join(DENSE_MODES), "a2a_precision": ", ".join(PRECISIONS),
           "grad_precision": ", ".join(PRECISIONS), "offload": "on or off", "pipeline": "on or off",
           "grad_buckets": f"an integer from 1 to {MAX_COUNT:,}", "overlap_chunks": f"an integer from 1 to {MAX_COUNT:,}",
           **{kind: ", ".join(ALLOWED_ALGORITHMS[kind]) for kind in COLLECTIVES}}
# the PlanArrays leaf each scalar key sets, and how its value becomes that leaf
LEAF = {"dense": "dense_mode", "a2a_precision": "a2a_precision", "grad_precision": "grad_precision",
        "offload": "offload", "pipeline": "pipeline", "grad_buckets": "grad_buckets", "overlap_chunks": "overlap_chunks"}


@dataclass(frozen=True)
class Hold:
    """Settings held at fixed values: (key, value) pairs in KEYS order (module docstring)."""

    items: tuple = ()

    def __bool__(self) -> bool:
        return bool(self.items)

    def as_dict(self) -> dict:
        return dict(self.items)

    def __contains__(self, key: str) -> bool:
        return key in self.as_dict()

    def __str__(self) -> str:
        word = lambda v: ("on" if v else "off") if isinstance(v, bool) else str(v)
        return ",".join(f"{k}={word(v)}" for k, v in self.items)

    @property
    def plan_fields(self) -> set[str]:
        """The Plan fields it holds (a collective's algorithm: "algorithms")."""
        return {"algorithms" if k in COLLECTIVES else k for k, _ in self.items}

    def apply(self, plan):
        """`plan` with the held settings."""
        if not self.items:
            return plan
        d = self.as_dict()
        algos = {k: v for k, v in d.items() if k in COLLECTIVES}
        scalars = {k: v for k, v in d.items() if k in SCALARS}
        if algos:
            scalars["algorithms"] = dict(plan.algorithms, **algos)
        return dataclasses.replace(plan, **scalars)

    def keeps(self, plan) -> bool:
        """Whether `plan` has every held setting."""
        return all((plan.algorithms.get(k) if k in COLLECTIVES else getattr(plan, k)) == v for k, v in self.items)

    def masks(self, masks: Masks) -> Masks:
        """`masks` allowing only the held dense mode, precisions and algorithms (and no offload when
        it is held off): what the relaxed restarts, the samplers and the setting moves read."""
        if not self.items:
            return masks
        d = self.as_dict()
        only = lambda mask, allowed, v: np.where(np.asarray(allowed) == v, np.asarray(mask), NEG).astype(np.float32)
        out = {}
        if "dense" in d:
            out["dense"] = only(masks.dense, DENSE_MODES, d["dense"])
        for key, field in (("a2a_precision", "a2a"), ("grad_precision", "grad")):
            if key in d:
                out[field] = only(getattr(masks, field), PRECISIONS, d[key])
        if any(k in d for k in COLLECTIVES):
            algos = np.array(masks.algos, np.float32)
            for c, kind in enumerate(COLLECTIVES):
                if kind in d:
                    algos[c] = np.where(np.asarray(ALGORITHMS) == d[kind], algos[c], NEG)
            out["algos"] = algos
        if d.get("offload") is False:
            out["engines"] = np.float32(0.0)
        return dataclasses.replace(masks, **out)

    def arrays(self, pa, batched: bool):
        """PlanArrays `pa` (a batch along a leading axis where `batched`) with the held settings'
        leaves: every plan a search scores is priced with them, whatever made it."""
        if not self.items:
            return pa
        d = self.as_dict()
        n = (np.shape(pa.offload)[0],) if batched else ()
        out = {}
        for key, leaf in LEAF.items():
            if key in d:
                out[leaf] = np.broadcast_to(_leaf(key, d[key]), n + np.shape(_leaf(key, d[key]))).copy()
        if any(k in d for k in COLLECTIVES):
            algo = np.array(pa.algorithm, np.float32)
            for c, kind in enumerate(COLLECTIVES):
                if kind in d:
                    algo[..., c, :] = np.eye(len(ALGORITHMS), dtype=np.float32)[ALGORITHMS.index(d[kind])]
            out["algorithm"] = algo
        return dataclasses.replace(pa, **out)


def _leaf(key: str, value) -> np.ndarray:
    if key == "dense":
        return np.eye(len(DENSE_MODES), dtype=np.float32)[DENSE_MODES.index(value)]
    if key in ("a2a_precision", "grad_precision"):
        return np.eye(len(PRECISIONS), dtype=np.float32)[PRECISIONS.index(value)]
    return np.asarray(float(value), np.float32)


def hold_all(plan) -> Hold:
    """Every setting of `plan` held."""
    d = {k: getattr(plan, k) for k in SCALARS}
    d.update({kind: plan.algorithms[kind] for kind in COLLECTIVES if kind in plan.algorithms})
    return Hold(tuple((k, d[k]) for k in KEYS if k in d))


def parse_hold(data, src: str = "", field: str = "hold") -> Hold:
    """A Hold from "key=value,key=value", a dict or a Hold; one ConfigError naming `src`, the field
    (field.key) and what is allowed otherwise."""
    if data is None:
        return Hold()
    if isinstance(data, Hold):
        return data
    if isinstance(data, str):
        pairs = {}
        for item in (x.strip() for x in data.replace(";", ",").split(",")):
            if not item:
                continue
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ConfigError(src, field, f"item {item!r} is not key=value (e.g. dense=replicated,overlap_chunks=1)")
            if key.strip() in pairs:
                raise ConfigError(src, f"{field}.{key.strip()}", "is given twice")
            pairs[key.strip()] = value.strip()
        data = pairs
    if not isinstance(data, dict):
        raise ConfigError(src, field, f"must be key=value pairs or a table of them, got {type(data).__name__}")
    out = {}
    for key, value in data.items():
        if key not in KEYS:
            raise ConfigError(src, f"{field}.{key}", f"is not a setting a plan may hold; allowed: {', '.join(KEYS)}")
        out[key] = _value(key, value, src, f"{field}.{key}")
    return Hold(tuple((k, out[k]) for k in KEYS if k in out))


def _value(key: str, value, src: str, where: str):
    bad = lambda: ConfigError(src, where, f"is {value!r}; allowed: {ALLOWED[key]}")
    if key in ("offload", "pipeline"):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in BOOLS:
            return BOOLS[value.strip().lower()]
        raise bad()
    if key in ("grad_buckets", "overlap_chunks"):
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value.strip())
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= MAX_COUNT:
            raise bad()
        return int(value)
    allowed = {"dense": DENSE_MODES, "a2a_precision": PRECISIONS, "grad_precision": PRECISIONS}.get(key) \
        or ALLOWED_ALGORITHMS[key]
    if not isinstance(value, str) or value.strip() not in allowed:
        raise bad()
    return value.strip()
