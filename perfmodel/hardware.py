"""Hardware: Chip, Nic, Offload engines, network levels and the System, as pytrees of floats.

Every number is an SI array leaf (FLOP/s, bytes, bytes/s, seconds, watts), so `jax.grad` of a step
time with respect to a System gives d step / d every hardware parameter. Structure (how many chips,
which network levels exist, whether the NIC also carries scale-up traffic) is static.

Loaded from `data/chips/<chip>.toml` and `data/systems/<family>.toml`; a system named
`<family>-<N>` is family `<family>` with N chips, its last domain partial where N does not fill it.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from .config import ConfigError, Section, exists, preset_names, preset_path, read_file
from .schema import (CHIP, CHIP_OPTIONS, GB, GBIT, GBPS, GROUP_LAYOUTS, LEVEL_LINKS, MAX_CHIPS, MAX_SYNC_EVERY, NIC_ATTACH,
                     SCALE_UP_KINDS, SYSTEM, TF, US)



def _pytree(cls):
    """Register a dataclass as a pytree: fields marked static=True are structure, the rest leaves."""
    meta = [f.name for f in dataclasses.fields(cls) if f.metadata.get("static")]
    data = [f.name for f in dataclasses.fields(cls) if not f.metadata.get("static")]
    return jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)


def static(**kw):
    return field(metadata={"static": True}, **kw)


@_pytree
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


@_pytree
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


@_pytree
@dataclass(frozen=True)
class Offload:
    """Collective-offload (message) engines. engines = 0: collectives run on the compute cores."""

    engines: jax.Array
    clock_Hz: jax.Array
    reduce_bytes_per_cycle: jax.Array
    reduce_bytes_per_cycle_all_busy: jax.Array
    setup_s: jax.Array
    msgs_per_engine: jax.Array


@_pytree
@dataclass(frozen=True)
class Level:
    """One network level: a domain of `size` chips joined by the `link` ("scale_up" | "scale_out")."""

    latency_s: jax.Array
    oversubscription: jax.Array
    size: int = static(default=1)
    link: str = static(default="scale_out")
    name: str = static(default="level")
    switch_reduction: bool = static(default=False)   # the level's switches reduce (scale-up: NVLS; scale-out: SHARP)


@_pytree
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


@_pytree
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


def _cut(levels, block: int) -> tuple:
    """The levels of the first `block` chips: those inside a block, and the first one reaching it
    cut to the block."""
    out = []
    for lv in levels:
        out.append(lv if lv.size < block else dataclasses.replace(lv, size=block))
        if lv.size >= block:
            break
    return tuple(out)


def _above(levels, block: int) -> tuple:
    """The levels one chip of each `block` of consecutive chips reaches: those larger than a block,
    each holding size / block of them."""
    return tuple(dataclasses.replace(lv, size=lv.size // block) for lv in levels if lv.size > block)


def replication_problem(system: System, replicas, layout: str = "strided") -> str | None:
    """Why `replicas` sharding groups in `layout` do not fit `system`, in words; None if they do."""
    D = system.num_chips
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        return f"must be an integer >= 1 (1: one sharding group of all {D} chips), got {replicas!r}"
    if layout not in GROUP_LAYOUTS:
        return f"has group layout {layout!r}; allowed: {', '.join(GROUP_LAYOUTS)}"
    R = int(replicas)
    if R == 1:
        return None
    if D % R or D // R < 2:
        return (f"is {R}: it must divide the {D:,} chips of {system.name} into groups of 2 or more chips "
                f"(at most {D // 2:,} replicas)")
    if system.partial:
        return (f"is {R}, but {system.name}'s last domain is partial; sharding groups need whole domains "
                f"(use a chip count of whole {system.levels[-2].size if len(system.levels) > 1 else 1}-chip domains)")
    block, what = (R, f"a shard's {R} replicas (on neighbouring ranks, strided groups)") if layout == "strided" \
        else (D // R, f"a sharding group of {D // R} consecutive ranks (contiguous groups)")
    for lv in system.levels:
        if lv.size % block and block % lv.size:
            return (f"is {R}: {what} would split a {lv.name} domain of {lv.size} chips unevenly; the sync and "
                    f"the all-to-alls need whole domains (use a block of chips that divides or is a multiple of "
                    f"{lv.size})")
    return None


def sync_every_problem(sync_every) -> str | None:
    """Why `sync_every` is no sync period of a 2D plan, in words; None if it is one."""
    k = sync_every
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_SYNC_EVERY:
        return (f"must be an integer from 1 to {MAX_SYNC_EVERY:,} (steps between the replicas' "
                f"synchronizations), got {k!r}")
    return None


def sharding_group(system: System, replicas: int, layout: str = "strided", sync_every: int = 1) -> System:
    """The System of one sharding group of a 2D plan (Replication): its G = D / replicas chips with
    the levels they reach (strided: each level's domains hold 1 / replicas of their chips; contiguous:
    the levels inside a group's block), the same chips and links, and `replication` to price what
    ties the groups together. replicas = 1: `system` itself. ConfigError naming `replicas` where the
    groups do not fit (replication_problem)."""
    why = replication_problem(system, replicas, layout)
    if why is not None:
        raise ConfigError("", "replicas", why)
    why = sync_every_problem(sync_every)
    if why is not None:
        raise ConfigError("", "sync_every", why)
    R = int(replicas)
    if R == 1:
        return system
    G = system.num_chips // R
    levels = _above(system.levels, R) if layout == "strided" else _cut(system.levels, G)
    per_host = max(1, system.chips_per_host // R) if layout == "strided" else min(system.chips_per_host, G)
    return dataclasses.replace(system, levels=levels, num_chips=G, chips_per_host=per_host,
                               name=f"{system.name}/{R}x{G}",
                               replication=Replication(system, R, layout, int(sync_every)))



def whole_system(system: System) -> System:
    """The system whose chips all hold the dense part: a 2D plan's sharding group's whole system,
    or `system` itself."""
    return system if system.replication is None else system.replication.whole


def replica_system(group: System) -> System:
    """The System of one shard's replicas (one chip of each sharding group) and the levels they
    reach: strided, the first `replicas` chips; contiguous, one chip of each block of a group's size."""
    rep = group.replication
    whole, R = rep.whole, rep.replicas
    levels = _cut(whole.levels, R) if rep.layout == "strided" else _above(whole.levels, group.num_chips)
    return dataclasses.replace(whole, levels=levels, num_chips=R, chips_per_host=min(whole.chips_per_host, R),
                               name=f"{whole.name} replicas", replication=None)


def capacity_bytes(system: System):
    """The HBM a device may use for the plan (the rest the runtime and fragmentation take)."""
    return system.chip.hbm_bytes * system.chip.hbm_usable


def present_in_domains(system: System) -> np.ndarray:
    """[D, K] int: the chips present in each device's domain at each level (its own domain's size;
    the last domain of a level holds what is left of the system)."""
    d = np.arange(system.num_chips)
    cols = [np.minimum(lv.size, system.num_chips - d // lv.size * lv.size) for lv in system.levels]
    return np.stack(cols, axis=-1) if cols else np.ones((system.num_chips, 0), int)


def peers_per_level(system: System) -> np.ndarray:
    """Peers each device first reaches at each level, float32: [K] on a full system (every device
    has size_l - size_(l-1)), [D, K] on a partial one (a device of the partial last domain has
    fewer peers inside it and more beyond)."""
    sizes = [lv.size for lv in system.levels]
    if not system.partial:
        return np.asarray([s - p for s, p in zip(sizes, [1] + sizes[:-1])], np.float32)
    present = present_in_domains(system)
    below = np.concatenate([np.ones_like(present[:, :1]), present[:, :-1]], axis=-1)
    return (present - below).astype(np.float32)


def domain_chips(system: System):
    """Chips in each device's innermost domain: the number L where every one is full, [D] float32
    where the last is partial."""
    if not system.uneven_domains:
        return system.domain_size
    return np.repeat(np.asarray(system.domain_sizes, np.float32), system.domain_sizes)


def padded_sizes(system: System) -> tuple[int, ...]:
    """Each level's domain size on the smallest full system holding this one (the last domain of
    every level filled up): the level sizes themselves on a full system."""
    out = []
    for lv in system.levels:
        below = out[-1] if out else 1
        out.append(-(-lv.size // below) * below)
    return tuple(out)


def link_bandwidths(system: System) -> tuple[jax.Array, jax.Array]:
    """Per-chip, per-direction line rate (bytes/s) of the scale-up and scale-out links.

    Behind PCIe (pcie = 1) the NIC's bandwidth B_nic = ports x port bandwidth is capped by the PCIe
    link; pcie in between blends the two: B_eff = (1 - pcie) B_nic + pcie min(B_nic, B_pcie).
    A NIC that serves scale-up splits it: up = f B_eff, out = (1 - f) B_eff. Otherwise scale-up is
    the dedicated link and scale-out the NIC.

    Written as sums and products of non-negative terms (no ratio of the two bandwidths, no
    1 + x - 1), so float32 keeps it exact at pcie = 0 or 1 (B_eff is B_nic or min(B_nic, B_pcie)
    to the bit) and monotone in every input over the schema's whole range.
    """
    nic, chip = system.nic, system.chip
    total = nic.active_ports * nic.port_Bps
    xp = jnp if isinstance(total, jax.Array) else np          # numpy arrays: cost.arrays
    eff = (1.0 - nic.pcie) * total + nic.pcie * xp.minimum(total, nic.pcie_Bps)
    if nic.serves_scale_up:
        return nic.scale_up_fraction * eff, (1.0 - nic.scale_up_fraction) * eff
    return chip.scale_up_Bps, eff


def link_efficiencies(system: System) -> tuple[jax.Array, jax.Array]:
    """Achievable fraction of the line rate of the scale-up and scale-out links: the NIC's
    (protocol headers, e.g. ~48.5 of 50 GB/s on ConnectX-7) for what it carries, the dedicated
    link's (e.g. NCCL's ~370 of NVLink4's 450 GB/s) for scale-up otherwise."""
    nic = system.nic
    return (nic.bandwidth_eff if nic.serves_scale_up else system.chip.scale_up_eff), nic.bandwidth_eff


def level_latency_s(system: System, level: Level) -> jax.Array:
    """Latency of one message (one algorithm step) at a level.

    Wire + switch latency of the level, plus, where a NIC carries it, the NIC's per-message
    processing, the host/proxy overhead, and the PCIe crossing when the NIC sits behind PCIe.
    """
    nic = system.nic
    through_nic = level.link == "scale_out" or nic.serves_scale_up
    if not through_nic:
        return level.latency_s + system.chip.scale_up_latency_s
    return level.latency_s + nic.latency_s + nic.per_message_s + nic.pcie * nic.pcie_latency_s


# ----------------------------------------------------------------------------------------- loading


def load_chip(name_or_path: str | Path) -> Chip:
    """Load a chip preset by name (`mtia300`) or from a TOML file path."""
    path = _resolve("chips", name_or_path)
    chip, _, _ = _parse_chip(read_file(path), str(path))
    return chip


def _resolve(kind: str, name_or_path: str | Path) -> Path:
    """The file of a preset name, or the path itself (one with a .toml / .json suffix, or anything
    that exists); ConfigError naming what was wrong otherwise."""
    what = kind[:-1]
    if not isinstance(name_or_path, (str, Path)):
        raise ConfigError("", what, f"must be a {what} preset name or a file path, got {type(name_or_path).__name__} "
                          f"{name_or_path!r}")
    if str(name_or_path) == "":
        raise ConfigError("", what, f"is empty; give a {what} preset name or a file path")
    p = Path(name_or_path)
    if p.suffix in (".toml", ".json") or exists(p):
        return p                  # read_file says what is wrong with it, if anything
    return preset_path(kind, str(name_or_path))


def _f(x: float) -> jax.Array:
    return jnp.asarray(x, dtype=jnp.float32)


def _reader(s: Section, table: dict, section: str):
    """num(key, **kw): the field `key` of `s`, checked against schema `table`'s bounds for `section`."""
    return lambda key, **kw: s.num(table[f"{section}.{key}" if section else key].num(**kw))


def _parse_chip(data: dict, src: str) -> tuple[Chip, Nic, Offload]:
    top = Section(data, src)
    name = top.text("name")
    top.text("description", default="")
    top.text("architecture", default="")      # read by architecture(): the family the model's error is known for

    c = top.sub("compute")
    num = _reader(c, CHIP, "compute")
    bf16, fp8, fp32 = num("peak_bf16_TFLOPs"), num("peak_fp8_TFLOPs"), num("peak_fp32_TFLOPs")
    units = num("compute_units")
    launch = num("launch_overhead_us")
    mm_max, mm_half = num("matmul_efficiency_max"), num("matmul_half_efficiency_GFLOP")
    grid = num("full_grid_gemm_share")
    c.finish()

    m = top.sub("memory")
    num = _reader(m, CHIP, "memory")
    hbm, hbm_bw = num("hbm_capacity_GB"), num("hbm_bandwidth_GBps")
    hbm_eff, hbm_use = num("hbm_efficiency"), num("hbm_usable_fraction")
    llc, llc_bw = num("llc_capacity_MB"), num("llc_bandwidth_GBps")
    g_max, g_half = num("gather_efficiency_max"), num("gather_half_efficiency_row_bytes")
    m.finish()

    n = top.sub("nic")
    num = _reader(n, CHIP, "nic")
    attach = n.text("attach", NIC_ATTACH)
    ports = num("ports")
    port_bw = num("port_bandwidth_Gbps")
    active = num("active_ports", hi=ports)
    shared = n.flag("serves_scale_up")
    frac = num("scale_up_fraction", required=shared, default=None if shared else 0.0)
    nic_eff = num("bandwidth_efficiency")
    nic_lat = num("latency_us")
    per_msg = num("per_message_overhead_us")
    chunk_s, chunk_bytes = num("chunk_overhead_us"), num("chunk_KiB")
    pcie = attach == "pcie"
    # An integrated NIC moved behind PCIe (a what-if) defaults to the chip's host PCIe link.
    pcie_bw = num("pcie_bandwidth_GBps", required=pcie, default=None if pcie else 0.0)
    pcie_lat = num("pcie_latency_us", required=pcie, default=None if pcie else 1.0)
    n.finish()

    su = top.sub("scale_up", required=not shared)
    num = _reader(su, CHIP, "scale_up")
    su_bw = num("bandwidth_GBps", required=not shared, default=None if not shared else 0.0)
    su_lat = num("latency_us", required=not shared, default=None if not shared else 0.0)
    su_eff = num("bandwidth_efficiency")
    su_kind = su.text("kind", SCALE_UP_KINDS, default=CHIP_OPTIONS["scale_up.kind"].default)
    nvls_eff = num("nvls_efficiency", required=False, default=su_eff)
    su.finish()
    if shared and su_bw:
        raise su.error("bandwidth_GBps", "must be absent when nic.serves_scale_up = true (the NIC carries scale-up)")

    o = top.sub("offload")
    num = _reader(o, CHIP, "offload")
    engines = num("engines")
    need = engines > 0
    opt = lambda unset: dict(required=need, default=None if need else unset)
    clock = num("clock_GHz", **opt(1.0))
    bpc = num("reduce_bytes_per_cycle", **opt(1.0))
    bpc_busy = num("reduce_bytes_per_cycle_all_busy", **opt(1.0))
    setup = num("setup_us", **opt(0.0))
    mpe = num("messages_in_flight_per_engine", **opt(1.0))
    o.finish()

    cc = top.sub("core_collectives")
    num = _reader(cc, CHIP, "core_collectives")
    cfrac, cmult = num("compute_fraction"), num("hbm_traffic_multiplier")
    cmsgs, dmult = num("messages_in_flight"), num("dma_hbm_traffic_multiplier")
    channels = num("channels", required=False, default=cmsgs)
    nvls_ch = num("nvls_channels")
    ll_max = num("ll_max_bus_GBps")
    call = num("call_overhead_us", required=False, default=launch / US)
    cc.finish()

    h = top.sub("host")
    num = _reader(h, CHIP, "host")
    host_bw, dram = num("link_bandwidth_GBps"), num("dram_GB")
    host_step = num("step_overhead_us")
    h.finish()
    pw = top.sub("power")
    tdp = _reader(pw, CHIP, "power")("tdp_W")
    pw.finish()
    pr = top.sub("price")
    usd = _reader(pr, CHIP, "price")("usd_per_hour")
    pr.finish()
    top.finish()

    chip = Chip(
        peak_bf16_flops=_f(bf16), peak_fp8_flops=_f(fp8), peak_fp32_flops=_f(fp32),
        compute_units=_f(units), launch_s=_f(launch), matmul_eff_max=_f(mm_max),
        matmul_half_flop=_f(mm_half), hbm_bytes=_f(hbm), hbm_Bps=_f(hbm_bw), hbm_eff=_f(hbm_eff),
        hbm_usable=_f(hbm_use), llc_bytes=_f(llc), llc_Bps=_f(llc_bw), gather_eff_max=_f(g_max),
        gather_half_row_bytes=_f(g_half), scale_up_Bps=_f(su_bw), scale_up_latency_s=_f(su_lat),
        core_compute_fraction=_f(cfrac), core_hbm_mult=_f(cmult), core_msgs_in_flight=_f(cmsgs),
        dma_hbm_mult=_f(dmult), host_link_Bps=_f(host_bw), host_dram_bytes=_f(dram),
        tdp_W=_f(tdp), usd_per_hour=_f(usd), name=name, scale_up_eff=_f(su_eff), scale_up_kind=su_kind,
        nvls_eff=_f(nvls_eff), core_channels=_f(channels), nvls_channels=_f(nvls_ch), ll_max_Bps=_f(ll_max), core_call_s=_f(call),
        full_grid_gemm_share=_f(grid), host_step_s=_f(host_step),
    )
    nic = Nic(
        pcie=_f(1.0 if pcie else 0.0), active_ports=_f(active), port_Bps=_f(port_bw),
        scale_up_fraction=_f(frac), latency_s=_f(nic_lat), per_message_s=_f(per_msg),
        pcie_Bps=_f(pcie_bw if pcie else host_bw), pcie_latency_s=_f(pcie_lat), serves_scale_up=shared,
        bandwidth_eff=_f(nic_eff), chunk_s=_f(chunk_s), chunk_bytes=_f(chunk_bytes),
    )
    off = Offload(
        engines=_f(engines), clock_Hz=_f(clock), reduce_bytes_per_cycle=_f(bpc),
        reduce_bytes_per_cycle_all_busy=_f(bpc_busy), setup_s=_f(setup), msgs_per_engine=_f(mpe),
    )
    return chip, nic, off


_SYSTEM_NAME = re.compile(r"^(?P<family>.+)-(?P<n>\d+)$")


def _chip_count(chips) -> int | None:
    """load_system's `chips`: None, or a whole number of chips in 1..MAX_CHIPS."""
    if chips is None:
        return None
    if isinstance(chips, (bool, np.bool_)) or not isinstance(chips, (int, np.integer)) or not 1 <= chips <= MAX_CHIPS:
        raise ConfigError("", "chips", f"must be an integer from 1 to {MAX_CHIPS:,} (or None: the preset's size), "
                          f"got {chips!r}")
    return int(chips)


def load_system(name_or_path: str | Path, *, chips: int | None = None,
                chip: str | Path | None = None) -> System:
    """Load a system: a preset name `<family>-<N>` (e.g. `mtia300-64`), a family name with `chips`
    (`mtia300`, chips=40), or a TOML path. Any size up to the outermost level loads: the last
    domain of a level may be partial (mtia300-40: racks of 16, 16 and 8).

    `chips` overrides the chip count; `chip` replaces the chip (a preset name or a chip TOML, e.g.
    one written by calibration).
    """
    count = _chip_count(chips)
    if not isinstance(name_or_path, (str, Path)) or str(name_or_path) == "":
        _resolve("systems", name_or_path)          # says what was wrong
    text = str(name_or_path)
    p = Path(text)
    if p.suffix in (".toml", ".json") or exists(p):
        path = _resolve("systems", p)
    else:
        match = _SYSTEM_NAME.match(text)
        families = preset_names("systems")
        if count is not None and text in families:         # a family name with its size given apart
            match = {"family": text, "n": str(count)}
        if not match or match["family"] not in families:
            known = ", ".join(f"{f}-<N>" for f in families)
            sized = " (or a family name with chips, e.g. --chips 40)" if text in families else ""
            raise ConfigError("", "system", f"unknown system {text!r}; known: {known}{sized} (see `perfmodel list`)")
        path = preset_path("systems", match["family"])
        if count is None:
            n = int(match["n"])
            if not 1 <= n <= MAX_CHIPS:
                raise ConfigError("", "system", f"{text!r} has {n:,} chips; a system has 1 to {MAX_CHIPS:,}")
            count = n
    # a size that does not fit the family is the fault of where the size came from: the `chips`
    # argument when given, the family file's levels otherwise (a name's size, a TOML's first size)
    blame = ("", "chips") if chips is not None else None
    return _parse_system(read_file(path), str(path), count, chip, blame)


def _parse_system(data: dict, src: str, count: int | None, chip_override,
                  blame: tuple[str, str] | None = None) -> System:
    top = Section(data, src)
    family = top.text("name")
    top.text("description", default="")
    chip_name = top.text("chip")
    if not chip_name.strip():
        raise top.error("chip", "is empty; give a chip preset name (e.g. 'h100') or a chip TOML path")
    sizes = top.nums(SYSTEM["sizes"].num(), most=1000)
    if not sizes:
        raise top.error("sizes", "must list at least one chip count (the family's named sizes, e.g. [8, 64])")
    num = _reader(top, SYSTEM, "")
    per_host = int(num("chips_per_host"))
    host_W, host_usd = num("host_power_W"), num("host_usd_per_hour")
    nic_over = top.raw("nic", {})
    if not isinstance(nic_over, dict):
        raise ConfigError(src, "nic", "must be a [nic] table of the chip's nic fields to override")
    net = top.sub("network")
    raw_levels = net.raw("levels")
    net.finish()
    if not isinstance(raw_levels, list) or not raw_levels:
        raise ConfigError(src, "network.levels", "must be a non-empty list of [[network.levels]] tables")
    if len(raw_levels) > 64:
        raise ConfigError(src, "network.levels", f"has {len(raw_levels)} levels; at most 64")
    n = int(count if count is not None else sizes[0])
    parsed = []
    prev = 1
    for i, raw in enumerate(raw_levels):        # every level is checked, even past this system's size
        s = Section(raw, src, f"network.levels[{i}].")
        num = _reader(s, SYSTEM, "network.levels[]")
        lname = s.text("name")
        link = s.text("link", LEVEL_LINKS)
        size = int(num("domain_chips"))
        lat = num("latency_us")
        over = num("oversubscription")
        reduces = s.flag("switch_reduction", default=False)
        s.finish()
        if size <= prev and i > 0:
            raise s.error("domain_chips", f"must grow from level to level (previous level has {prev})")
        parsed.append((size, link, lname, lat, over, reduces))
        prev = size
    levels = []
    for size, link, lname, lat, over, reduces in parsed:
        levels.append((min(size, n), link, lname, lat, over, reduces))
        if size >= n:
            break
    top.finish()
    where = lambda lname: "" if blame is None else f" ({lname!r} in {src})"     # the file is not in the blame
    most = parsed[-1][0]
    if levels[-1][0] < n:
        raise ConfigError(*(blame or (src, "network.levels")), f"the outermost level{where(levels[-1][2])} holds "
                          f"{most:,} chips; the system has {n:,}: use at most {most:,}")
    # the last domain of a level may be partial (absent chips are the last ones), but a domain
    # holds whole domains of the level inside it: the prefix of a full system
    for (inner, *_), (outer, _, lname, *_) in zip(levels, levels[1:-1]):
        if outer % inner:
            raise ConfigError(src, "network.levels", f"{lname!r} holds {outer:,} chips, not whole domains of {inner:,}")
    if n % per_host and n > per_host and per_host < levels[0][0]:
        raise ConfigError(*(blame or (src, "chips")), f"{n} chips do not fill whole hosts of {per_host}"
                          f"{where('chips_per_host')}; use a multiple of {per_host}{_near(n, per_host, most)}")

    chip_path = _resolve("chips", chip_override if chip_override is not None else chip_name)
    chip_data, chip_src = read_file(chip_path), str(chip_path)
    if nic_over:        # the system's NICs (a node's, not the chip's: e.g. a cloud instance's EFA)
        chip_data = {**chip_data, "nic": {**chip_data.get("nic", {}), **nic_over}}
        chip_src = f"{chip_path} with the [nic] of {src}"
    chip, nic, off = _parse_chip(chip_data, chip_src)
    lv = tuple(Level(latency_s=_f(lat), oversubscription=_f(over), size=size, link=link, name=lname,
                     switch_reduction=reduces)
               for size, link, lname, lat, over, reduces in levels)
    return System(chip=chip, nic=nic, offload=off, levels=lv, host_power_W=_f(host_W),
                  host_usd_per_hour=_f(host_usd), num_chips=n, chips_per_host=min(per_host, n),
                  name=f"{family}-{n}", files=(src, str(chip_path)))


def architecture(system: System) -> str:
    """The chip's architecture family (the chip file's `architecture`, e.g. "hopper"), the unit over
    which the model's error is fitted and transferred (uncertainty/modelerror.py); a chip file that
    names none is a family of its own (its file name), so nothing fitted on another family claims it."""
    if len(system.files) < 2:
        return system.name
    path = Path(system.files[1])
    try:
        value = read_file(path).get("architecture", "")
    except ConfigError:
        value = ""
    return str(value).strip().lower() or f"chip:{path.stem}"


def _near(n: int, step: int, most: int) -> str:
    """The sizes next to n that are whole multiples of `step` (at most `most`), as ' (e.g. 32 or 48)'."""
    near = [m for m in (n // step * step, (n // step + 1) * step) if 1 <= m <= most]
    return f" (e.g. {' or '.join(str(m) for m in near)})" if near else ""


def system_families() -> list[tuple[str, list[int], str]]:
    """(family, named sizes, description) for each bundled system family."""
    out = []
    for fam in preset_names("systems"):
        data = read_file(preset_path("systems", fam))
        out.append((fam, [int(s) for s in data.get("sizes", [])], data.get("description", "")))
    return out
