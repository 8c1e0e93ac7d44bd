"""What every numeric field of a chip, system and model file may hold: one table of (section, key,
unit, leaf, bounds) that the loaders, the calibration writer and the sweep knobs all read.

    from perfmodel.schema import CHIP
    CHIP["memory.hbm_bandwidth_GBps"]   # Field(section='memory', key='hbm_bandwidth_GBps', unit='GB/s',
                                        #       scale=1e9, leaf='chip.hbm_Bps', lo=0.001, hi=1e6)

A field's value is in the unit its key names; `scale` converts it to SI (`leaf` is the array of the
loaded System or RankingModel that holds it, in SI). Bounds are inclusive and in the key's unit.

Why these bounds. The model runs in float32 (about 1.2e-38 to 3.4e38). Each bound is wide enough
for any machine or model in sight (every preset sits orders of magnitude inside), and narrow enough
that every derived quantity stays finite and positive: a time is at most bytes or FLOPs over the
slowest rate the bounds allow (about 1e25 s at the far corner, summed over MAX_TABLES tables and
MAX_GEMMS GEMMs), and the cost and energy figures multiply it by at most MAX_CHIPS chips' prices
and powers (< 1e37). A positive minimum keeps a value from becoming 0 in float32 (a bandwidth of
1e-300 GB/s is 0 B/s there, and a step time NaN). tests/test_schema.py evaluates the corners.

Structure is sized before anything is built from it: MAX_CHIPS chips in a system, MAX_TABLES
embedding tables, MAX_LAYERS layers in one dense layer and MAX_GEMMS GEMMs in the dense part.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import Num

MAX_CHIPS = 65_536        # evaluated in seconds and < 1.1 GB with dlrm-small; its default plan takes longer
MAX_TABLES = 100_000      # 100,000 tables evaluate finitely (about a minute, mostly compile)
MAX_LAYERS = 10_000       # layers of one [[dense.layers]] entry (a transformer's blocks)
MAX_GEMMS = 100_000       # GEMMs of the whole dense part, once its layers are lowered

US, GB, GBPS, TF, GBIT, MB = 1e-6, 1e9, 1e9, 1e12, 1e9 / 8, 1e6


@dataclass(frozen=True)
class Field:
    """One numeric field of a config file."""

    section: str           # the TOML table ("memory", "network.levels[]", "dense.layers[]"; "" at the top)
    key: str               # the TOML key, its unit in its name
    unit: str              # the key's unit, for messages ("GB/s"; "" for a ratio or a count)
    scale: float           # SI units per unit of the key
    leaf: str | None       # the array it sets, dotted from the System or RankingModel ("chip.hbm_Bps")
    lo: float              # smallest allowed value (inclusive), in the key's unit
    hi: float              # largest allowed value (inclusive)
    integer: bool = False

    @property
    def name(self) -> str:
        """The dotted name a message gives ("memory.hbm_bandwidth_GBps")."""
        return f"{self.section}.{self.key}" if self.section else self.key

    def num(self, **kw) -> Num:
        """The spec config.Section reads the field with; kw: required / default / a tighter hi."""
        spec = dict(scale=self.scale, lo=self.lo, hi=self.hi, integer=self.integer, unit=self.unit)
        return Num(self.key, **{**spec, **kw})

    def allowed(self) -> str:
        return self.num().allowed()


def _fields(*rows) -> dict[str, Field]:
    out = {}
    for row in rows:
        f = Field(*row)
        assert f.name not in out and 0 <= f.lo < f.hi < math.inf, f
        out[f.name] = f
    return out


_I = True     # integer

CHIP = _fields(
    # section, key, unit, scale, leaf, lo, hi[, integer]
    ("compute", "peak_bf16_TFLOPs", "TFLOP/s", TF, "chip.peak_bf16_flops", 1e-3, 1e6),
    ("compute", "peak_fp8_TFLOPs", "TFLOP/s", TF, "chip.peak_fp8_flops", 1e-3, 1e6),
    ("compute", "peak_fp32_TFLOPs", "TFLOP/s", TF, "chip.peak_fp32_flops", 1e-3, 1e6),
    ("compute", "compute_units", "", 1.0, "chip.compute_units", 1, 1e6, _I),
    ("compute", "launch_overhead_us", "us", US, "chip.launch_s", 0.0, 1e6),
    ("compute", "matmul_efficiency_max", "", 1.0, "chip.matmul_eff_max", 1e-3, 1.0),
    ("compute", "matmul_half_efficiency_GFLOP", "GFLOP", 1e9, "chip.matmul_half_flop", 1e-9, 1e9),
    ("compute", "full_grid_gemm_share", "", 1.0, "chip.full_grid_gemm_share", 0.0, 1.0),
    ("memory", "hbm_capacity_GB", "GB", GB, "chip.hbm_bytes", 1e-6, 1e6),
    ("memory", "hbm_bandwidth_GBps", "GB/s", GBPS, "chip.hbm_Bps", 1e-3, 1e6),
    ("memory", "hbm_efficiency", "", 1.0, "chip.hbm_eff", 1e-3, 1.0),
    ("memory", "hbm_usable_fraction", "", 1.0, "chip.hbm_usable", 1e-3, 1.0),
    ("memory", "llc_capacity_MB", "MB", MB, "chip.llc_bytes", 0.0, 1e6),
    ("memory", "llc_bandwidth_GBps", "GB/s", GBPS, "chip.llc_Bps", 0.0, 1e6),
    ("memory", "gather_efficiency_max", "", 1.0, "chip.gather_eff_max", 1e-3, 1.0),
    ("memory", "gather_half_efficiency_row_bytes", "bytes", 1.0, "chip.gather_half_row_bytes", 1e-3, 1e6),
    ("nic", "ports", "", 1.0, None, 1, 1024, _I),
    ("nic", "port_bandwidth_Gbps", "Gb/s", GBIT, "nic.port_Bps", 8e-3, 8e6),     # 0.001 to 1e6 GB/s
    ("nic", "active_ports", "", 1.0, "nic.active_ports", 1, 1024, _I),
    # a share of the NIC within [0.001, 0.999]: the other share, 1 - f, keeps 3 significant digits
    # in float32 (f is held to 6e-8)
    ("nic", "scale_up_fraction", "", 1.0, "nic.scale_up_fraction", 1e-3, 0.999),
    ("nic", "bandwidth_efficiency", "", 1.0, "nic.bandwidth_eff", 1e-3, 1.0),
    ("nic", "latency_us", "us", US, "nic.latency_s", 0.0, 1e6),
    ("nic", "per_message_overhead_us", "us", US, "nic.per_message_s", 0.0, 1e6),
    ("nic", "pcie_bandwidth_GBps", "GB/s", GBPS, "nic.pcie_Bps", 1e-3, 1e6),
    ("nic", "pcie_latency_us", "us", US, "nic.pcie_latency_s", 0.0, 1e6),
    ("scale_up", "bandwidth_GBps", "GB/s", GBPS, "chip.scale_up_Bps", 1e-3, 1e6),
    ("scale_up", "latency_us", "us", US, "chip.scale_up_latency_s", 0.0, 1e6),
    ("scale_up", "bandwidth_efficiency", "", 1.0, "chip.scale_up_eff", 1e-3, 1.0),
    ("scale_up", "nvls_efficiency", "", 1.0, "chip.nvls_eff", 1e-3, 1.0),
    ("offload", "engines", "", 1.0, "offload.engines", 0, 1024, _I),
    ("offload", "clock_GHz", "GHz", 1e9, "offload.clock_Hz", 1e-3, 1e3),
    ("offload", "reduce_bytes_per_cycle", "bytes", 1.0, "offload.reduce_bytes_per_cycle", 1e-3, 1e6),
    ("offload", "reduce_bytes_per_cycle_all_busy", "bytes", 1.0, "offload.reduce_bytes_per_cycle_all_busy",
     1e-3, 1e6),
    ("offload", "setup_us", "us", US, "offload.setup_s", 0.0, 1e6),
    ("offload", "messages_in_flight_per_engine", "", 1.0, "offload.msgs_per_engine", 1, 1e6),
    ("core_collectives", "compute_fraction", "", 1.0, "chip.core_compute_fraction", 0.0, 0.9),
    ("core_collectives", "hbm_traffic_multiplier", "", 1.0, "chip.core_hbm_mult", 0.0, 100.0),
    ("core_collectives", "messages_in_flight", "", 1.0, "chip.core_msgs_in_flight", 1, 1e6),
    ("core_collectives", "dma_hbm_traffic_multiplier", "", 1.0, "chip.dma_hbm_mult", 0.0, 100.0),
    ("core_collectives", "channels", "", 1.0, "chip.core_channels", 1, 1024, _I),
    ("core_collectives", "nvls_channels", "", 1.0, "chip.nvls_channels", 1, 1024, _I),
    ("core_collectives", "ll_max_bus_GBps", "GB/s", GBPS, "chip.ll_max_Bps", 1e-3, 1e6),
    ("core_collectives", "call_overhead_us", "us", US, "chip.core_call_s", 0.0, 1e6),
    ("host", "link_bandwidth_GBps", "GB/s", GBPS, "chip.host_link_Bps", 1e-3, 1e6),
    ("host", "dram_GB", "GB", GB, "chip.host_dram_bytes", 0.0, 1e9),
    ("power", "tdp_W", "W", 1.0, "chip.tdp_W", 1e-3, 1e6),
    ("price", "usd_per_hour", "$/h", 1.0, "chip.usd_per_hour", 0.0, 1e6),
)

SYSTEM = _fields(
    ("", "sizes", "chips", 1.0, None, 1, MAX_CHIPS, _I),
    ("", "chips_per_host", "chips", 1.0, None, 1, MAX_CHIPS, _I),
    ("", "host_power_W", "W", 1.0, "host_power_W", 0.0, 1e6),
    ("", "host_usd_per_hour", "$/h", 1.0, "host_usd_per_hour", 0.0, 1e6),
    # a level's domain may be larger than any system built from the family (a fabric's reach)
    ("network.levels[]", "domain_chips", "chips", 1.0, None, 1, 1e9, _I),
    ("network.levels[]", "latency_us", "us", US, "levels[].latency_s", 0.0, 1e6),
    ("network.levels[]", "oversubscription", "", 1.0, "levels[].oversubscription", 1.0, 1e3),
)

MODEL = _fields(
    ("", "global_batch", "samples", 1.0, "global_batch", 1, 1e8, _I),
    ("", "param_bytes", "bytes", 1.0, "param_bytes", 0.125, 64.0),
    ("", "activation_bytes", "bytes", 1.0, "activation_bytes", 0.125, 64.0),
    ("embeddings", "bytes_per_element", "bytes", 1.0, "tables.bytes_per_element", 0.125, 64.0),
    ("embeddings", "index_bytes", "bytes", 1.0, "tables.index_bytes", 1.0, 64.0),
    ("embeddings", "rows", "rows", 1.0, "tables.rows", 1, 1e12, _I),
    ("embeddings", "pooling", "lookups/sample", 1.0, "tables.pooling", 1e-3, 1e5),
    ("embeddings", "dim", "", 1.0, "tables.dim", 1, 1e5, _I),
    ("embeddings", "access_skew", "", 1.0, "tables.access_skew", 1e-3, 1.0),
    # the sizes of a dense layer (each kind takes some: workload._LAYER_FIELDS), lowered to GEMMs
    ("dense.layers[]", "input", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "widths", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "features", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "dim", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "width", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "low_rank", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "seq_len", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "d_model", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "heads", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "ffn", "", 1.0, None, 1, 1e6, _I),
    ("dense.layers[]", "layers", "", 1.0, None, 1, MAX_LAYERS, _I),
)

# the array each field sets -> the field: a System's (chip, nic, offload, levels, host) and a
# RankingModel's (the knobs of a sweep are checked against them)
SYSTEM_LEAVES = {f.leaf: f for f in (*CHIP.values(), *SYSTEM.values()) if f.leaf}
MODEL_LEAVES = {f.leaf: f for f in MODEL.values() if f.leaf}
