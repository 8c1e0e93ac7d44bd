"""Seeded benchmark instances for the search: small ones (solved exactly) and the named suite."""

from __future__ import annotations

import math

import numpy as np

from ..config import ConfigError
from ..hardware import System, load_system
from ..workload import RankingModel, load_model, parse_model

SMALL_TABLES, SMALL_DEVICES = 12, 4


def small_instance(seed: int) -> tuple[System, RankingModel]:
    """A small instance: 12 synthetic tables (seeded) on 4 chips (MTIA 300 for even seeds, H100
    for odd ones), a small DLRM dense part, a global batch of 16,384. All instances share shapes,
    so a search compiles once per system family."""
    rng = np.random.default_rng(seed)
    data = {
        "name": "small-instance",
        "global_batch": 16384,
        "dense_dtype": "bf16", "param_bytes": 4, "activation_bytes": 2, "dense_optimizer": "adagrad",
        "embeddings": {
            "bytes_per_element": 4, "optimizer": "rowwise_adagrad", "index_bytes": 8,
            "synthetic": {"seed": int(seed), "num_tables": SMALL_TABLES,
                          "total_params": float(rng.uniform(2e8, 2e9)), "dims": [32, 64, 128],
                          "dim_weights": [0.3, 0.4, 0.3], "mean_pooling": float(rng.uniform(5, 40))},
        },
        "dense": {"layers": [
            {"kind": "mlp", "name": "bottom_mlp", "stage": "bottom", "input": 13, "widths": [256, 64]},
            {"kind": "mlp", "name": "top_mlp", "stage": "top", "input": 1024, "widths": [512, 256, 1]},
        ]},
    }
    system = load_system(f"{'mtia300' if seed % 2 == 0 else 'h100'}-{SMALL_DEVICES}")
    # one source name for every seed: the model's file is part of its static structure, so a name per
    # seed would compile every program again for each instance
    return system, parse_model(data, "small instance")


def synthetic_model(seed: int, num_tables: int, total_params: float) -> RankingModel:
    """A ranking model over `num_tables` synthetic tables (perfmodel.generator: heavy-tailed rows and
    pooling), with MLPerf DLRM-DCNv2's MLP widths as the dense part over their concatenation; global
    batch 65,536. benchmarks/vs_torchrec.py's 300-table case is (seed 0, 300, 2.5e10)."""
    from ..generator import synthetic_embeddings

    g = synthetic_embeddings(seed=seed, num_tables=num_tables, total_params=total_params)
    width = int(sum(g["dim"])) + 128                # pooled embeddings + the bottom MLP's output
    data = {
        "name": f"synthetic-{num_tables}", "description": "synthetic tables, MLPerf-like dense part",
        "global_batch": 65536, "dense_dtype": "bf16", "param_bytes": 4, "activation_bytes": 2,
        "dense_optimizer": "adagrad",
        "embeddings": {"bytes_per_element": 4, "optimizer": "rowwise_adagrad", "index_bytes": 8,
                       "rows": g["rows"], "dim": g["dim"], "pooling": g["pooling"],
                       "access_skew": g["access_skew"], "names": g["names"]},
        "dense": {"layers": [
            {"kind": "mlp", "name": "bottom_mlp", "stage": "bottom", "input": 13, "widths": [512, 256, 128]},
            {"kind": "mlp", "name": "top_mlp", "stage": "top", "input": width, "widths": [1024, 1024, 512, 256, 1]},
        ]},
    }
    return parse_model(data, f"synthetic model ({num_tables} tables, seed {seed})")


# synthetic models by name (synthetic_model's seed, tables, parameters): benchmarks/vs_torchrec.py's
# 300-table case, and 120 tables on h100-32, where TorchRec's plan as a start leads to a basin the
# search's own starts miss
SYNTHETIC = {"synthetic-300": (0, 300, 2.5e10), "synthetic-120": (11, 120, 6e9)}
SUITE = (("dlrm-dcnv2-mlperf", "mtia300-64"), ("dlrm-dcnv2-mlperf", "h100-64"), ("dlrm-dcnv2-mlperf", "h100-16"),
         ("prod-856", "mtia300-256"), ("prod-856", "h100-256"), ("rec-150b", "mtia300-1024"),
         ("synthetic-300", "h100-64"), ("synthetic-120", "h100-32"))


def load_instance(model: str, system: str) -> tuple[System, RankingModel]:
    """(system, model) of a suite entry: presets, or a SYNTHETIC model by name."""
    if model in SYNTHETIC:
        seed, tables, params = SYNTHETIC[model]
        return load_system(system), synthetic_model(seed=seed, num_tables=tables, total_params=params)
    return load_system(system), load_model(model)


def _entries(text: str) -> list[str]:
    """The non-empty comma-separated entries of a command-line list, stripped."""
    return [e.strip() for e in text.split(",") if e.strip()]


def parse_instances(text: str, field: str = "--instances") -> list[tuple[str, str]]:
    """'model@system,model@system' -> [(model, system)], every preset checked to load; ConfigError
    naming `field`, the entry and what is allowed otherwise. Empty text: []."""
    pairs = []
    for entry in _entries(text):
        parts = entry.split("@")
        if len(parts) != 2 or not all(parts):
            raise ConfigError("", field, f"entry {entry!r} is not model@system (e.g. dlrm-dcnv2-mlperf@h100-64)")
        if parts[0] not in SYNTHETIC:
            load_model(parts[0])                      # unknown presets: ConfigError listing the known ones
        load_system(parts[1])
        pairs.append((parts[0], parts[1]))
    return pairs


def parse_budgets(text: str, field: str = "--warm-budgets") -> list[float]:
    """'0.2,0.5,1' -> [0.2, 0.5, 1.0]; ConfigError naming `field` and the entry unless each is a
    number of seconds > 0. Empty text: []."""
    out = []
    for entry in _entries(text):
        try:
            b = float(entry)
        except ValueError:
            b = float("nan")
        if not (math.isfinite(b) and b > 0):
            raise ConfigError("", field, f"entry {entry!r} is not a number of seconds > 0")
        out.append(b)
    return out
