"""What every numeric field of a chip, system and model file may hold: one table of (section, key,
unit, leaf, bounds) that the loaders, the calibration writer and the sweep knobs all read.

    from perfmodel.schema import CHIP
    CHIP["memory.hbm_bandwidth_GBps"]   # Field(section='memory', key='hbm_bandwidth_GBps', unit='GB/s',
                                        #       scale=1e9, leaf='chip.hbm_Bps', lo=0.001, hi=1e6)

A field's value is in the unit its key names; `scale` converts it to SI (`leaf` is the array of the
loaded System or RankingModel that holds it, in SI). Bounds are inclusive and in the key's unit.

The rows build the hardware: every row whose `leaf` is `chip.<name>`, `nic.<name>`, `offload.<name>`,
`levels[].<name>` or `<name>` (the System's own) is a field of that dataclass (hardware/types.py), and
the chip and system loaders read each such row as the row says (hardware/loading.py). A new chip
field is one row here, the formula that uses it and the preset files' lines. A row's default may be a
number, another row's name (its value), or When(condition, otherwise): required where the condition
holds, else `otherwise`; `at_most` names a row whose value bounds this one.

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

from .config import Num, Section

MAX_CHIPS = 65_536        # evaluated in seconds and < 1.1 GB with dlrm-small; its default plan takes longer
MAX_TABLES = 100_000      # 100,000 tables evaluate finitely (about a minute, mostly compile)
MAX_LAYERS = 10_000       # layers of one [[dense.layers]] entry (a transformer's blocks)
MAX_GEMMS = 100_000       # GEMMs of the whole dense part, once its layers are lowered

US, GB, GBPS, TF, GBIT, MB = 1e-6, 1e9, 1e9, 1e12, 1e9 / 8, 1e6


@dataclass(frozen=True)
class When:
    """A default that depends on other fields: the field is required where `condition` holds, else
    it is `otherwise` (a number in the field's unit, or another field's name: its value).

    A condition is `<field>` (a flag, or a number other than 0), `not <field>`, `<field> == <word>`
    or `<field> > <number>`, a field named as the messages name it ("nic.serves_scale_up")."""

    condition: str
    otherwise: float | str

    def holds(self, value) -> bool:
        """Whether the condition holds, `value(name)` giving a field's value: a number in SI (the
        conditions compare counts, whose unit is SI), a word or a flag."""
        words = self.condition.split()
        negate = words[0] == "not"
        if negate:
            words = words[1:]
        got = value(words[0])
        if len(words) == 1:
            out = bool(got)
        elif words[1] == "==":
            out = got == words[2]
        elif words[1] == ">":
            out = got > float(words[2])
        else:
            raise ValueError(f"condition {self.condition!r}: the operator is == or >")
        return out != negate

    def __str__(self) -> str:
        other = f"{self.otherwise:g}" if isinstance(self.otherwise, float) else self.otherwise
        return f"required when {self.condition}, else {other}"


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
    default: float | str | When | None = None    # the value when absent; None: required; a field's name:
                                                 # its value; When: required where a condition holds; other
                                                 # text: a default its loader works out (a model's)
    meaning: str = ""
    label: str = ""        # a short name for study tables (sensitivity); "" : the meaning
    at_most: str = ""      # a field whose value bounds this one from above (active_ports: ports)

    @property
    def name(self) -> str:
        """The dotted name a message gives ("memory.hbm_bandwidth_GBps")."""
        return f"{self.section}.{self.key}" if self.section else self.key

    def num(self, **kw) -> Num:
        """The spec config.Section reads the field with; kw: required / default / a tighter hi. A
        field with a numeric default takes it unless kw says otherwise."""
        spec = dict(scale=self.scale, lo=self.lo, hi=self.hi, integer=self.integer, unit=self.unit,
                    ranged=self.ranged)
        if isinstance(self.default, float) and "default" not in kw and "required" not in kw:
            spec.update(required=False, default=self.default)
        return Num(self.key, **{**spec, **kw})

    def allowed(self) -> str:
        return self.num().allowed()

    @property
    def ranged(self) -> bool:
        """Whether the field may carry an uncertainty (`<key>_range`): a continuous input of the model;
        counts and the file's structure are exact."""
        return self.leaf is not None and not self.integer


def _fields(*rows) -> dict[str, Field]:
    out = {}
    for row in rows:
        f = Field(*row)
        assert f.name not in out and 0 <= f.lo < f.hi < math.inf, f
        out[f.name] = f
    return out


def reader(s: Section, table: dict[str, Field], section: str):
    """num(key, **kw): the field `key` of `s`, checked against `table`'s bounds for `section` ("" at
    the top); kw (required / default / a tighter hi) as Field.num."""
    return lambda key, **kw: s.num(table[f"{section}.{key}" if section else key].num(**kw))


_I = True     # integer

CHIP = _fields(
    # section, key, unit, scale, leaf, lo, hi, integer, default, meaning[, label]
    ("compute", "peak_bf16_TFLOPs", "TFLOP/s", TF, "chip.peak_bf16_flops", 1e-3, 1e6, False, None,
     'dense bf16 peak of one chip',
     'peak bf16 compute'),
    ("compute", "peak_fp8_TFLOPs", "TFLOP/s", TF, "chip.peak_fp8_flops", 1e-3, 1e6, False, None,
     'dense fp8 peak of one chip',
     'peak fp8 compute'),
    ("compute", "peak_fp32_TFLOPs", "TFLOP/s", TF, "chip.peak_fp32_flops", 1e-3, 1e6, False, None,
     'dense fp32 peak of one chip',
     'peak fp32 compute'),
    ("compute", "compute_units", "", 1.0, "chip.compute_units", 1, 1e6, _I, None,
     "cores / SMs / PEs a kernel's grid spreads over (core-driven collectives hold some)",
     'compute units (cores / SMs)'),
    ("compute", "launch_overhead_us", "us", US, "chip.launch_s", 0.0, 1e6, False, None,
     'fixed cost of one kernel launch',
     'kernel launch overhead'),
    ("compute", "matmul_efficiency_max", "", 1.0, "chip.matmul_eff_max", 1e-3, 1.0, False, None,
     'share of peak a large GEMM reaches',
     'GEMM efficiency, large GEMMs'),
    ("compute", "matmul_half_efficiency_GFLOP", "GFLOP", 1e9, "chip.matmul_half_flop", 1e-9, 1e9, False, None,
     'GEMM size at which it reaches half of matmul_efficiency_max',
     'GEMM size at half efficiency'),
    ("compute", "full_grid_gemm_share", "", 1.0, "chip.full_grid_gemm_share", 0.0, 1.0, False, 0.0,
     'share of GEMMs sized to the whole grid (wave quantization when a collective holds units)'),
    ("memory", "hbm_capacity_GB", "GB", GB, "chip.hbm_bytes", 1e-6, 1e6, False, None,
     'HBM per chip',
     'HBM capacity'),
    ("memory", "hbm_bandwidth_GBps", "GB/s", GBPS, "chip.hbm_Bps", 1e-3, 1e6, False, None,
     'HBM peak bandwidth',
     'HBM bandwidth'),
    ("memory", "hbm_efficiency", "", 1.0, "chip.hbm_eff", 1e-3, 1.0, False, None,
     'share of HBM peak bandwidth a streaming kernel reaches',
     'HBM achievable fraction'),
    ("memory", "hbm_usable_fraction", "", 1.0, "chip.hbm_usable", 1e-3, 1.0, False, None,
     'share of HBM a plan may use (the rest: runtime, fragmentation)',
     'HBM usable fraction'),
    ("memory", "llc_capacity_MB", "MB", MB, "chip.llc_bytes", 0.0, 1e6, False, None,
     'last-level cache / on-chip SRAM',
     'last-level cache capacity'),
    ("memory", "llc_bandwidth_GBps", "GB/s", GBPS, "chip.llc_Bps", 0.0, 1e6, False, None,
     'last-level cache bandwidth',
     'last-level cache bandwidth'),
    ("memory", "gather_efficiency_max", "", 1.0, "chip.gather_eff_max", 1e-3, 1.0, False, None,
     'share of HBM bandwidth embedding row gathers reach with long rows',
     'embedding gather efficiency, large rows'),
    ("memory", "gather_half_efficiency_row_bytes", "bytes", 1.0, "chip.gather_half_row_bytes", 1e-3, 1e6, False, None,
     'row size at which gathers reach half of gather_efficiency_max',
     'row size at half gather efficiency'),
    ("nic", "ports", "", 1.0, None, 1, 1024, _I, None,
     'NIC ports per chip'),
    ("nic", "port_bandwidth_Gbps", "Gb/s", GBIT, "nic.port_Bps", 8e-3, 8e6, False, None,     # 0.001 to 1e6 GB/s
     'bandwidth of one port, each direction',
     'NIC port bandwidth'),
    ("nic", "active_ports", "", 1.0, "nic.active_ports", 1, 1024, _I, None,
     'ports cabled and in use (at most ports)',
     'active NIC ports', 'nic.ports'),
    # a share of the NIC within [0.001, 0.999]: the other share, 1 - f, keeps 3 significant digits
    # in float32 (f is held to 6e-8)
    ("nic", "scale_up_fraction", "", 1.0, "nic.scale_up_fraction", 1e-3, 0.999, False, When('nic.serves_scale_up', 0.0),
     "share of the NIC's bandwidth that carries scale-up traffic",
     'NIC share on scale-up'),
    ("nic", "bandwidth_efficiency", "", 1.0, "nic.bandwidth_eff", 1e-3, 1.0, False, 1.0,
     "share of the ports' bandwidth transfers reach",
     'NIC achievable fraction of line rate'),
    ("nic", "latency_us", "us", US, "nic.latency_s", 0.0, 1e6, False, None,
     "one message's NIC-to-NIC latency",
     'NIC latency per message'),
    ("nic", "per_message_overhead_us", "us", US, "nic.per_message_s", 0.0, 1e6, False, None,
     'host / proxy cost per message',
     'host / proxy cost per message'),
    ("nic", "chunk_overhead_us", "us", US, "nic.chunk_s", 0.0, 1e4, False, 0.0,
     "the network stack's fixed cost per chunk a channel sends (NCCL's net proxy, the net plugin: post and completion)"),
    ("nic", "chunk_KiB", "KiB", 1024.0, "nic.chunk_bytes", 4.0, 1e5, False, 512.0,
     "most bytes one chunk of a network step carries (NCCL's Simple buffer over its 8 steps: 4 MiB / 8)"),
    ("nic", "pcie_bandwidth_GBps", "GB/s", GBPS, "nic.pcie_Bps", 1e-3, 1e6, False, When('nic.attach == pcie', 'host.link_bandwidth_GBps'),
     'PCIe link between the chip and a PCIe NIC (caps its bandwidth)',
     'PCIe bandwidth in front of the NIC'),
    ("nic", "pcie_latency_us", "us", US, "nic.pcie_latency_s", 0.0, 1e6, False, When('nic.attach == pcie', 1.0),
     'added latency per PCIe transaction',
     'PCIe latency per message'),
    ("scale_up", "bandwidth_GBps", "GB/s", GBPS, "chip.scale_up_Bps", 1e-3, 1e6, False, When('not nic.serves_scale_up', 0.0),
     'scale-up (NVLink-like) bandwidth per chip, each direction',
     'dedicated scale-up link bandwidth (NVLink)'),
    ("scale_up", "latency_us", "us", US, "chip.scale_up_latency_s", 0.0, 1e6, False, When('not nic.serves_scale_up', 0.0),
     'scale-up latency',
     'dedicated scale-up link latency'),
    ("scale_up", "bandwidth_efficiency", "", 1.0, "chip.scale_up_eff", 1e-3, 1.0, False, 1.0,
     'share of scale-up bandwidth transfers reach',
     'scale-up link achievable fraction'),
    ("scale_up", "nvls_efficiency", "", 1.0, "chip.nvls_eff", 1e-3, 1.0, False, 'scale_up.bandwidth_efficiency',
     'share reached by in-switch (NVLS) reductions'),
    ("offload", "engines", "", 1.0, "offload.engines", 0, 1024, _I, None,
     'communication-offload engines per chip (0: collectives are core-driven)',
     'offload engines'),
    ("offload", "clock_GHz", "GHz", 1e9, "offload.clock_Hz", 1e-3, 1e3, False, When('offload.engines > 0', 1.0),
     'engine clock',
     'offload engine clock'),
    ("offload", "reduce_bytes_per_cycle", "bytes", 1.0, "offload.reduce_bytes_per_cycle", 1e-3, 1e6, False, When('offload.engines > 0', 1.0),
     'bytes one engine reduces per cycle',
     'engine reduce bytes/cycle, one busy'),
    ("offload", "reduce_bytes_per_cycle_all_busy", "bytes", 1.0, "offload.reduce_bytes_per_cycle_all_busy",
     1e-3, 1e6, False, When('offload.engines > 0', 1.0),
     'bytes per cycle per engine when all are busy',
     'engine reduce bytes/cycle, all busy'),
    ("offload", "setup_us", "us", US, "offload.setup_s", 0.0, 1e6, False, When('offload.engines > 0', 0.0),
     'set-up cost of one offloaded operation',
     'engine setup per collective'),
    ("offload", "messages_in_flight_per_engine", "", 1.0, "offload.msgs_per_engine", 1, 1e6, False, When('offload.engines > 0', 1.0),
     'messages one engine keeps in flight',
     'messages in flight per engine'),
    ("core_collectives", "compute_fraction", "", 1.0, "chip.core_compute_fraction", 0.0, 0.9, False, None,
     'share of the compute units a core-driven collective holds',
     'compute share of a core-driven collective'),
    ("core_collectives", "hbm_traffic_multiplier", "", 1.0, "chip.core_hbm_mult", 0.0, 100.0, False, None,
     'HBM bytes a core-driven collective moves per network byte',
     'HBM bytes per network byte, core-driven'),
    ("core_collectives", "messages_in_flight", "", 1.0, "chip.core_msgs_in_flight", 1, 1e6, False, None,
     'messages a core-driven collective keeps in flight',
     'messages in flight, core-driven'),
    ("core_collectives", "dma_hbm_traffic_multiplier", "", 1.0, "chip.dma_hbm_mult", 0.0, 100.0, False, None,
     'HBM bytes per network byte when DMA or engines move it',
     'HBM bytes per network byte, engine DMA'),
    ("core_collectives", "channels", "", 1.0, "chip.core_channels", 1, 1024, _I, 'core_collectives.messages_in_flight',
     "channels (NCCL's) a core-driven collective runs"),
    ("core_collectives", "nvls_channels", "", 1.0, "chip.nvls_channels", 1, 1024, _I, 16.0,
     'channels of in-switch (NVLS) reductions'),
    ("core_collectives", "ll_max_bus_GBps", "GB/s", GBPS, "chip.ll_max_Bps", 1e-3, 1e6, False, 1000000.0,
     "bus bandwidth NCCL's low-latency protocol reaches at most"),
    ("core_collectives", "call_overhead_us", "us", US, "chip.core_call_s", 0.0, 1e6, False, 'compute.launch_overhead_us',
     'fixed cost of one collective call'),
    ("host", "link_bandwidth_GBps", "GB/s", GBPS, "chip.host_link_Bps", 1e-3, 1e6, False, None,
     'chip-to-host link (host-DRAM embedding shards cross it)',
     'chip-host link bandwidth'),
    ("host", "dram_GB", "GB", GB, "chip.host_dram_bytes", 0.0, 1e9, False, None,
     'host DRAM per chip for embedding shards kept off HBM',
     'host DRAM per chip'),
    ("host", "step_overhead_us", "us", US, "chip.host_step_s", 0.0, 1e6, False, 20.0,
     "host's fixed work per training step that the chip waits for (closing sync, next step's graph launch)"),
    ("power", "tdp_W", "W", 1.0, "chip.tdp_W", 1e-3, 1e6, False, None,
     'chip power, for energy per sample',
     'chip TDP'),
    ("price", "usd_per_hour", "$/h", 1.0, "chip.usd_per_hour", 0.0, 1e6, False, None,
     'chip price, for cost per sample',
     'chip price'),
)

SYSTEM = _fields(
    ("", "sizes", "chips", 1.0, None, 1, MAX_CHIPS, _I, None,
     "the family's named sizes (system name <family>-<chips>)"),
    ("", "chips_per_host", "chips", 1.0, None, 1, MAX_CHIPS, _I, None,
     'chips in one host'),
    ("", "host_power_W", "W", 1.0, "host_power_W", 0.0, 1e6, False, None,
     'power of one host beyond its chips',
     'host power (accelerators included)'),
    ("", "host_usd_per_hour", "$/h", 1.0, "host_usd_per_hour", 0.0, 1e6, False, None,
     'price of one host beyond its chips',
     'host price'),
    # a level's domain may be larger than any system built from the family (a fabric's reach)
    ("network.levels[]", "domain_chips", "chips", 1.0, None, 1, 1e9, _I, None,
     'chips one domain of this level holds (grows level to level; a whole number of the previous level\'s domains); a system\'s last domain may hold fewer'),
    ("network.levels[]", "latency_us", "us", US, "levels[].latency_s", 0.0, 1e6, False, None,
     'latency of a hop at this level',
     'wire + switch latency'),
    ("network.levels[]", "oversubscription", "", 1.0, "levels[].oversubscription", 1.0, 1e3, False, None,
     'bandwidth taper at this level (1: full bisection)',
     'oversubscription'),
)

MODEL = _fields(
    ("", "global_batch", "samples", 1.0, "global_batch", 1, 1e8, _I, None,
     'samples per training step, over all chips'),
    ("", "param_bytes", "bytes", 1.0, "param_bytes", 0.125, 64.0, False, None,
     'bytes per dense parameter (master weights)'),
    ("", "activation_bytes", "bytes", 1.0, "activation_bytes", 0.125, 64.0, False, None,
     'bytes per activation element'),
    ("embeddings", "bytes_per_element", "bytes", 1.0, "tables.bytes_per_element", 0.125, 64.0, False, None,
     'bytes per embedding weight (one number, or a list: one per table)'),
    ("embeddings", "index_bytes", "bytes", 1.0, "tables.index_bytes", 1.0, 64.0, False, None,
     'bytes per lookup index'),
    ("embeddings", "rows", "rows", 1.0, "tables.rows", 1, 1e12, _I, None,
     'rows of each table (a list, one per table)'),
    ("embeddings", "pooling", "lookups/sample", 1.0, "tables.pooling", 1e-3, 1e5, False, None,
     'mean lookups per sample of each table (a list, or one number for all)'),
    ("embeddings", "dim", "", 1.0, "tables.dim", 1, 1e5, _I, None,
     'embedding dim of each table (a list, or one number for all)'),
    ("embeddings", "access_skew", "", 1.0, "tables.access_skew", 1e-3, 1.0, False, 1.0,
     'legacy skew rule: HBM cache hit rate = cache_ratio ** access_skew (1: uniform access); not with access_zipf, '
     'access_distinct_rows or access_top_share'),
    # the access distribution (cost/access.py): a Zipf law over the rows ever accessed, optionally a
    # measured top-share curve, and a multi-hot expansion of each drawn id
    ("embeddings", "access_zipf", "", 1.0, "tables.access_zipf", 0.0, 10.0, False, 0.0,
     'Zipf exponent s of each table\'s ids: the i-th most frequent row takes a share i^-s (0: uniform)'),
    ("embeddings", "access_distinct_rows", "rows", 1.0, "tables.access_distinct_rows", 1, 1e12, _I, 'rows (all rows)',
     'rows of each table that are ever accessed (the ids the Zipf law ranks), at most rows'),
    ("embeddings", "access_multi_hot", "ids", 1.0, "tables.access_multi_hot", 1, 1e5, _I, 1.0,
     'multi-hot expansion: each drawn id becomes itself and k - 1 rows fixed per id, drawn uniformly '
     'over the table (MLPerf\'s synthetic multi-hot Criteo); pooling counts the expanded ids'),
    ("embeddings", "access_top_fractions", "", 1.0, None, 1e-6, 1.0, False, 'none (no curve)',
     'fractions f of the distinct rows, increasing, at which access_top_share gives the measured share of lookups'),
    # the sizes of a dense layer (each kind takes some: workload._LAYER_FIELDS), lowered to GEMMs
    ("dense.layers[]", "input", "", 1.0, None, 1, 1e6, _I, None,
     'mlp: input width (after an mlp, dot or dcnv2 layer: its output width)'),
    ("dense.layers[]", "widths", "", 1.0, None, 1, 1e6, _I, None,
     "mlp: each layer's output width"),
    ("dense.layers[]", "features", "", 1.0, None, 1, 1e6, _I, None,
     'dot: vectors interacting (tables + the bottom output)'),
    ("dense.layers[]", "dim", "", 1.0, None, 1, 1e6, _I, None,
     "dot: width of each vector (the tables' dim, the bottom output)"),
    ("dense.layers[]", "width", "", 1.0, None, 1, 1e6, _I, None,
     "dcnv2: input width (bottom output + the tables' embeddings)"),
    ("dense.layers[]", "low_rank", "", 1.0, None, 1, 1e6, _I, None,
     'dcnv2: rank of the low-rank cross'),
    ("dense.layers[]", "seq_len", "", 1.0, None, 1, 1e6, _I, None,
     'transformer / hstu: sequence length'),
    ("dense.layers[]", "d_model", "", 1.0, None, 1, 1e6, _I, None,
     'transformer / hstu: model width'),
    ("dense.layers[]", "heads", "", 1.0, None, 1, 1e6, _I, None,
     'transformer / hstu: attention heads (divide d_model)'),
    ("dense.layers[]", "ffn", "", 1.0, None, 1, 1e6, _I, None,
     'transformer: feed-forward width'),
    ("dense.layers[]", "layers", "", 1.0, None, 1, MAX_LAYERS, _I, None,
     'dcnv2 / transformer / hstu: blocks'),
)

# the array each field sets -> the field: a System's (chip, nic, offload, levels, host) and a
# RankingModel's (the knobs of a sweep are checked against them)
SYSTEM_LEAVES = {f.leaf: f for f in (*CHIP.values(), *SYSTEM.values()) if f.leaf}
MODEL_LEAVES = {f.leaf: f for f in MODEL.values() if f.leaf}


# ------------------------------------------------------------------------ words, not numbers
# The vocabularies the files use; plan/, workload.py, hardware/ and constraints.py read them here.
SHARDING_TYPES = ("data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise")
DENSE_MODES = ("replicated", "fully_sharded", "hybrid")
ALGORITHMS = ("ring", "direct", "tree", "hierarchical")
COLLECTIVES = ("all_to_all", "all_reduce", "reduce_scatter", "all_gather")
ALLOWED_ALGORITHMS = {
    "all_to_all": ("direct", "hierarchical"),
    "all_reduce": ("ring", "direct", "tree", "hierarchical"),
    "reduce_scatter": ("ring", "direct", "hierarchical"),
    "all_gather": ("ring", "direct", "hierarchical"),
}
PRECISIONS = ("fp32", "bf16", "fp8")
# TorchRec's compute kernels (EmbeddingComputeKernel) for what a plan says: data_parallel tables
# "dense", tables all in HBM "fused", tables in host DRAM with an HBM cache of cache_ratio
# "fused_uvm_caching" (its cache_params.load_factor = cache_ratio)
COMPUTE_KERNELS = ("dense", "fused", "fused_uvm_caching")
LAYER_KINDS = ("mlp", "dot", "dcnv2", "transformer", "hstu")
STAGES = ("bottom", "top")
EMB_OPTIMIZERS = ("sgd", "rowwise_adagrad", "adam")
DENSE_OPTIMIZER_NAMES = ("sgd", "adagrad", "adam")
GUARD_UNITS = ("s", "ms", "us")
NIC_ATTACH = ("integrated", "pcie")
SCALE_UP_KINDS = ("nvlink", "pcie")
LEVEL_LINKS = ("scale_up", "scale_out")
GROUP_LAYOUTS = ("strided", "contiguous")   # 2D plans: how the sharding groups sit on the ranks (hardware.Replication)
MAX_SYNC_EVERY = 1_000_000


@dataclass(frozen=True)
class Option:
    """One field that is not a bounded number: text, a flag, a list, a table or a per-table entry."""

    section: str
    key: str
    kind: str                       # "text", "flag", "list", "table", "integer", "number"
    allowed: str                    # the choices (Choices) or the rule, as a message gives it
    default: str | None             # None: required
    meaning: str
    leaf: str | None = None         # the dataclass field it sets, as Field.leaf: static text or flag, or,
    index: bool = False             # with index, the choice's position as a float leaf (nic.pcie: a blend)

    @property
    def choices(self) -> tuple[str, ...] | None:
        """The words a text option allows, or None for any text."""
        return getattr(self.allowed, "choices", None)

    @property
    def name(self) -> str:
        return f"{self.section}.{self.key}" if self.section else self.key


def _options(*rows) -> dict[str, Option]:
    out = {o.name: o for o in (Option(*r) for r in rows)}
    assert len(out) == len(rows)
    return out


class Choices(str):
    """The text "one of a, b" a message and the reference give, holding the words themselves."""

    def __new__(cls, choices):
        out = super().__new__(cls, "one of " + ", ".join(choices))
        out.choices = tuple(choices)
        return out


_one = Choices

CHIP_OPTIONS = _options(
    ("", "name", "text", "any", None, "the chip's name", "chip.name"),
    ("", "description", "text", "any", "", "one line for `perfmodel list`"),
    ("", "architecture", "text", "any (e.g. ampere, hopper, blackwell, mtia, gaudi)", "",
     "the chip's architecture family: the unit the model's error is fitted and carried over (none: a family of "
     "its own)"),
    ("", "calibrated", "text", "any", "",
     "what the chip's numbers were fitted to (perfmodel calibrate --steps writes it): the family's bias is fitted "
     "away, so the model's error draws the spread within a family about 0"),
    ("nic", "attach", "text", _one(NIC_ATTACH), None,
     "integrated: in the package, DMA from HBM; pcie: behind a PCIe link", "nic.pcie", True),
    ("nic", "serves_scale_up", "flag", "true or false", None, "the NIC also carries scale-up traffic (no [scale_up] link)",
     "nic.serves_scale_up"),
    ("scale_up", "kind", "text", _one(SCALE_UP_KINDS), "nvlink", "what the scale-up link is", "chip.scale_up_kind"),
)
SYSTEM_OPTIONS = _options(
    ("", "name", "text", "any", None, "the family's name (systems are <name>-<chips>)"),
    ("", "description", "text", "any", "", "one line for `perfmodel list`"),
    ("", "chip", "text", "a chip preset or a chip TOML path (relative to this file)", None, "the chip every rank is"),
    ("", "nic", "table", "fields of the chip's [nic]", "{}", "the node's NICs, replacing the chip's fields (a cloud instance's)"),
    ("network.levels[]", "name", "text", "any", None, "the level's name (nvlink, leaf, spine, ...)", "levels[].name"),
    ("network.levels[]", "link", "text", _one(LEVEL_LINKS), None, "which link carries this level", "levels[].link"),
    ("network.levels[]", "switch_reduction", "flag", "true or false", "false", "switches reduce in the network (SHARP-like)",
     "levels[].switch_reduction"),
)
MODEL_OPTIONS = _options(
    ("", "name", "text", "any", None, "the model's name"),
    ("", "description", "text", "any", "", "one line for `perfmodel list`"),
    ("", "dense_dtype", "text", _one(PRECISIONS), None, "dtype of the dense compute"),
    ("", "dense_optimizer", "text", _one(DENSE_OPTIMIZER_NAMES), None, "optimizer of the dense part (its state per parameter)"),
    ("embeddings", "optimizer", "text", _one(EMB_OPTIMIZERS), None, "embedding optimizer (its state per row or element)"),
    ("embeddings", "names", "list", "distinct text, one per table", "t0, t1, ...", "the tables' names (plans and constraints use them)"),
    ("embeddings", "features", "list", "per table a non-empty list of feature names; a feature on one table only",
     "one feature per table", "TorchRec's feature_names: the features reading each table, each its own pooled vector"),
    ("embeddings", "sequence", "list", "true or false, one per table", "all false",
     "an unpooled (jagged) feature: pooling x dim values per sample"),
    ("embeddings", "access_top_share", "list", "per table [] (unknown) or one share per access_top_fractions, "
     "each in [0, 1], non-decreasing", "none",
     "measured top-share curve: the share of lookups the most frequent fraction f of the distinct rows take"),
    ("embeddings", "synthetic", "table", "generator.synthetic_embeddings' arguments", "none",
     "draw the tables (num_tables, total_params, dims, ...) instead of listing rows, dim, pooling"),
    ("dense.layers[]", "kind", "text", _one(LAYER_KINDS), None, "the layer's kind"),
    ("dense.layers[]", "name", "text", "any", "<kind><index>", "the layer's name in breakdowns"),
    ("dense.layers[]", "stage", "text", _one(STAGES), None, "bottom: before the interaction; top: after it"),
    ("constraints", "<table>", "table", "constraint fields (below)", "none", "per-table constraints the search keeps"),
)
PLAN = _options(
    ("", "tables", "table", "every table of the model, by name", None, "per table: sharding_type, ranks, cache_ratio"),
    ("tables.<table>", "sharding_type", "text", _one(SHARDING_TYPES), None, "how the table is split (TorchRec's names)"),
    ("tables.<table>", "ranks", "list", "distinct ranks 0..D-1: table_wise one, column_wise k dividing dim (TorchRec "
     "splits columns evenly), table_row_wise one scale-up domain, row_wise and data_parallel all", None, "where its shards are"),
    ("tables.<table>", "cache_ratio", "number", "in (0, 1]; 1 for data_parallel", "1",
     "share of each shard in HBM; the rest in host DRAM (TorchRec: fused_uvm_caching, load_factor)"),
    ("", "dense", "text", _one(DENSE_MODES), "replicated", "dense parallelism"),
    ("", "algorithms", "table", "per collective: " + "; ".join(f"{k} {', '.join(v)}" for k, v in ALLOWED_ALGORITHMS.items()),
     "direct all-to-all, ring otherwise", "the algorithm of each collective"),
    ("", "a2a_precision", "text", _one(PRECISIONS), "fp32", "precision of the embedding all-to-alls"),
    ("", "grad_precision", "text", _one(PRECISIONS), "fp32", "precision of the gradient sync"),
    ("", "offload", "flag", "true or false", "true", "collectives on the offload engines"),
    ("", "pipeline", "flag", "true or false", "true", "embedding all-to-alls overlap the previous / next batch"),
    ("", "grad_buckets", "integer", "1 to 1024", "4", "gradient-sync buckets"),
    ("", "overlap_chunks", "integer", "1 to 1024", "1", "chunks of compute / communication overlap"),
    ("", "replicas", "integer", "dividing the chips into sharding groups of 2 or more, aligned to the network's "
     "domains", "1", "2D sparse parallelism: the tables' ranks are a group's (0..D/replicas-1), every group holds "
     "them all and the replicas of a shard are synchronized"),
    ("", "group_layout", "text", _one(GROUP_LAYOUTS), "strided",
     "strided: a shard's replicas on neighbouring ranks (TorchRec's default); contiguous: a group on consecutive ranks"),
    ("", "sync_every", "integer", f"1 to {MAX_SYNC_EVERY:,}", "1", "steps between the replicas' synchronizations "
     "(1: the touched rows' gradients every step; more: weights and optimizer state every k steps)"),
)
GUARD = _options(
    ("", "name", "text", "any", "guard", "the second cost model's name"),
    ("", "unit", "text", _one(GUARD_UNITS), "s", "unit of cap and the costs"),
    ("", "cap", "number", "> 0", None, "the most the busiest device's sum of shard costs may be"),
    ("", "tables", "table", "table names of the model", None,
     "per table, per sharding type: a shard's cost (per device or position lists for data_parallel, row_wise, "
     "table_row_wise; per shard count for column_wise)"),
    ("", "source", "text", "any", "", "where the costs come from"),
)
CONSTRAINT = _options(
    ("<table>", "sharding_types", "list", _one(SHARDING_TYPES), "all", "the sharding types the table may take"),
    ("<table>", "compute_kernels", "list", _one(COMPUTE_KERNELS) + " (fused_uvm is not modelled)", "all",
     "TorchRec's kernels: dense = data_parallel, fused = all in HBM, fused_uvm_caching = host DRAM with an HBM cache"),
    ("<table>", "cache_load_factor", "number or [lo, hi]", "in (0, 1)", "any; 0.2 (TorchRec's) when fused_uvm_caching "
     "is the only kernel", "the HBM cache ratio of a fused_uvm_caching table; alone, it allows only that kernel"),
    ("<table>", "min_partition", "integer", ">= 1, at most the table's dim", "32",
     "TorchRec's: the narrowest column-wise shard, in columns"),
    ("<table>", "max_cw_shards", "integer", ">= 1", "the number of ranks", "the most column-wise shards"),
    ("<table>", "ranks", "list", "distinct ranks of the system", "all",
     "ranks its shards may be on: table_wise one of them, column_wise k of them, table_row_wise a whole scale-up "
     "domain of them; fewer than all rule out row_wise and data_parallel"),
    ("", "replicas", "list", "replica counts the system's domains allow (perfmodel search --replicas auto lists "
     "them)", "[1]", "2D plans: the replica counts a plan may take (a table's ranks are then a sharding group's)"),
    ("", "sync_every", "integer", f"1 to {MAX_SYNC_EVERY:,}", "1", "2D plans: the most steps between the replicas' "
     "synchronizations"),
    ("", "hold", "table", "dense, a2a_precision, grad_precision, offload, pipeline, grad_buckets, overlap_chunks, "
     "all_to_all, all_reduce, reduce_scatter, all_gather", "none", "plan settings the framework fixes, which every "
     "plan a search scores keeps (e.g. hold = {dense = \"replicated\", overlap_chunks = 1})"),
)
