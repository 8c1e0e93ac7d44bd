"""Dataclasses as JAX pytrees: the numbers are array leaves (jit, vmap and grad see them), the
structure (counts, names, flags) is static.

    @pytree
    @dataclass(frozen=True)
    class Level:
        latency_s: jax.Array                   # a leaf
        size: int = static(default=1)          # structure
"""

from __future__ import annotations

from dataclasses import field, fields

import jax


def pytree(cls):
    """Register a dataclass as a pytree: fields marked static=True are structure, the rest leaves."""
    meta = [f.name for f in fields(cls) if f.metadata.get("static")]
    data = [f.name for f in fields(cls) if not f.metadata.get("static")]
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)


def static(metadata=None, **kw):
    """A dataclass field that is structure, not a leaf (pytree)."""
    return field(metadata={**(metadata or {}), "static": True}, **kw)
