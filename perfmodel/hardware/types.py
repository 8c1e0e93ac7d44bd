"""The hardware's types: Chip, Nic, Offload engines, network Levels and the System, as pytrees of
floats.

Every number is an SI array leaf (FLOP/s, bytes, bytes/s, seconds, watts), so `jax.grad` of a step
time with respect to a System gives d step / d every hardware parameter. Structure (how many chips,
which network levels exist, whether the NIC also carries scale-up traffic) is static.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import jax

from ..pytree import pytree, static


@pytree
@dataclass(frozen=True)
class Chip:
    """One accelerator: compute, memory, efficiency curves, and how core-driven collectives behave."""

    peak_bf16_flops: jax.Array
    peak_fp8_flops: jax.Array
    peak_fp32_flops: jax.Array
    compute_units: jax.Array
    launch_s: jax.Array
    matmul_eff_max: jax.Array
    matmul_half_flop: jax.Array          # GEMM size (FLOP) at which efficiency is half the max
    hbm_bytes: jax.Array
    hbm_Bps: jax.Array
    hbm_eff: jax.Array
    hbm_usable: jax.Array                 # fraction of HBM a plan may use
    llc_bytes: jax.Array
    llc_Bps: jax.Array
    gather_eff_max: jax.Array
    gather_half_row_bytes: jax.Array      # row size (bytes) at which gather efficiency is half the max
    scale_up_Bps: jax.Array               # dedicated scale-up link (NVLink); 0 where the NIC carries it
    scale_up_latency_s: jax.Array
    core_compute_fraction: jax.Array      # compute units a core-driven collective occupies
    core_hbm_mult: jax.Array              # HBM bytes per network byte, core-driven
    core_msgs_in_flight: jax.Array
    dma_hbm_mult: jax.Array               # HBM bytes per network byte, engine-driven
    host_link_Bps: jax.Array
    host_dram_bytes: jax.Array
    tdp_W: jax.Array
    usd_per_hour: jax.Array
    name: str = static(default="chip")
    scale_up_eff: jax.Array = 1.0         # achievable fraction of the dedicated scale-up link's line rate
    scale_up_kind: str = static(default="nvlink")   # the dedicated scale-up link: "nvlink" or "pcie"
    nvls_eff: jax.Array = 1.0             # NVLS's achievable fraction of the scale-up line rate
    core_channels: jax.Array = 16.0       # NCCL channels (one CTA each) of a core-driven collective
    nvls_channels: jax.Array = 16.0       # NCCL's NVLS channels
    ll_max_Bps: jax.Array = 1e30          # NCCL LL protocol's bus-bandwidth cap on one node
    core_call_s: jax.Array = 3e-6         # fixed cost of one core-driven collective call
    full_grid_gemm_share: jax.Array = 0.0 # share of GEMM time in kernels sized to the whole grid
    host_step_s: jax.Array = 20e-6        # the host's fixed work per step that the device waits for


@pytree
@dataclass(frozen=True)
class Nic:
    """The chip's NICs: bandwidth, how they attach (integrated in the package, or behind PCIe)."""

    pcie: jax.Array                       # 1.0: NIC behind PCIe; 0.0: integrated (blends in between)
    active_ports: jax.Array
    port_Bps: jax.Array
    scale_up_fraction: jax.Array          # share of NIC bandwidth on scale-up (when it serves scale-up)
    latency_s: jax.Array                  # NIC processing per message
    per_message_s: jax.Array              # host / proxy cost per network message
    pcie_Bps: jax.Array
    pcie_latency_s: jax.Array
    serves_scale_up: bool = static(default=False)
    bandwidth_eff: jax.Array = 1.0        # achievable fraction of the NIC's line rate (protocol headers)
    chunk_s: jax.Array = 0.0              # the network stack's fixed cost per chunk (proxy / plugin)
    chunk_bytes: jax.Array = 524288.0     # most bytes per chunk of a network step


@pytree
@dataclass(frozen=True)
class Offload:
    """Collective-offload (message) engines. engines = 0: collectives run on the compute cores."""

    engines: jax.Array
    clock_Hz: jax.Array
    reduce_bytes_per_cycle: jax.Array
    reduce_bytes_per_cycle_all_busy: jax.Array
    setup_s: jax.Array
    msgs_per_engine: jax.Array


@pytree
@dataclass(frozen=True)
class Level:
    """One network level: a domain of `size` chips joined by the `link` ("scale_up" | "scale_out")."""

    latency_s: jax.Array
    oversubscription: jax.Array
    size: int = static(default=1)
    link: str = static(default="scale_out")
    name: str = static(default="level")
    switch_reduction: bool = static(default=False)   # the level's switches reduce (scale-up: NVLS; scale-out: SHARP)


@pytree
@dataclass(frozen=True)
class System:
    """A cluster: num_chips chips, chips_per_host per host, network levels from the innermost out.

    The chips are a prefix of the smallest full system holding them (padded_sizes): every domain
    is full but the last of each level, which holds what is left (`partial`, `domain_sizes`); a
    level's `size` is its full domain's (the outermost: num_chips)."""

    chip: Chip
    nic: Nic
    offload: Offload
    levels: tuple[Level, ...]
    host_power_W: jax.Array
    host_usd_per_hour: jax.Array
    num_chips: int = static(default=1)
    chips_per_host: int = static(default=1)
    name: str = static(default="system")
    files: tuple[str, ...] = static(default=())     # the system file and the chip file it was loaded from
    # set on a sharding group of a 2D plan (sharding_group): how the group sits in the whole system
    replication: "Replication | None" = None

    @property
    def domain_size(self) -> int:
        """Chips in a full innermost (scale-up) domain."""
        return self.levels[0].size if self.levels else 1

    @property
    def partial(self) -> bool:
        """Whether the last domain of some level holds fewer chips than a full one."""
        return any(self.num_chips % lv.size for lv in self.levels)

    @property
    def uneven_domains(self) -> bool:
        """Whether the innermost (scale-up) domains differ in size (the last one is partial)."""
        return bool(self.levels) and self.num_chips % self.domain_size != 0

    @property
    def domain_sizes(self) -> tuple[int, ...]:
        """Chips in each innermost domain, in rank order: full ones, then a partial last one, if any."""
        L, n = self.domain_size, self.num_chips
        return (L,) * (n // L) + ((n % L,) if n % L else ())

    @property
    def num_domains(self) -> int:
        """Innermost (scale-up) domains, a partial last one counted."""
        return len(self.domain_sizes)

    @property
    def num_hosts(self) -> int:
        """Hosts, a partial last one counted."""
        return -(-self.num_chips // self.chips_per_host)

    def replace(self, **changes) -> "System":
        return dataclasses.replace(self, **changes)


@pytree
@dataclass(frozen=True)
class Replication:
    """How a sharding group of a 2D plan sits in the whole system (sharding_group).

    2D sparse parallelism (Meta's, TorchRec's DMPCollection) makes the D chips R replicas of
    sharding groups of G = D / R chips: every table is sharded inside each group by one group plan,
    and the R copies of each shard (one per group) are synchronized. TorchRec lays the groups out in
    one of two ways (DMPCollection's process groups):

      strided     group g holds ranks g, g + R, g + 2R, ...: a shard's R replicas sit on R
                  neighbouring ranks, so their sync runs on the innermost links (the default)
      contiguous  group g holds ranks g G .. g G + G - 1: the all-to-alls stay on a block of the
                  network and the sync crosses the levels above it (use_inter_host_allreduce)

    sync_every k: the replicas synchronize every k steps. k = 1 all-reduces the gradients of the rows
    a step touched (a synchronous step, as data parallelism over the replicas); k > 1 averages the
    shards' weights and optimizer state every k steps (DMPCollection.sync), its cost spread over k."""

    whole: "System"
    replicas: int = static(default=1)
    layout: str = static(default="strided")
    sync_every: int = static(default=1)
