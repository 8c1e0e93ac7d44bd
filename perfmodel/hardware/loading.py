"""Chip and system files: `data/chips/<chip>.toml` and `data/systems/<family>.toml` (or any path)
into a System; a system named `<family>-<N>` is family `<family>` with N chips, its last domain
partial where N does not fill it."""

from __future__ import annotations

import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ..config import ConfigError, Section, exists, preset_names, preset_path, read_file
from ..presets import locate
from ..schema import CHIP, CHIP_OPTIONS, LEVEL_LINKS, MAX_CHIPS, NIC_ATTACH, SCALE_UP_KINDS, SYSTEM, US, reader
from .types import Chip, Level, Nic, Offload, System


def load_chip(name_or_path: str | Path) -> Chip:
    """Load a chip preset by name (`mtia300`) or from a TOML file path."""
    path = locate("chips", name_or_path)
    chip, _, _ = parse_chip(read_file(path), str(path))
    return chip


def _f(x: float) -> jax.Array:
    return jnp.asarray(x, dtype=jnp.float32)


def parse_chip(data: dict, src: str) -> tuple[Chip, Nic, Offload]:
    """The Chip, Nic and Offload of a chip file's contents `data` (read from `src`, for messages)."""
    top = Section(data, src)
    name = top.text("name")
    top.text("description", default="")

    c = top.sub("compute")
    num = reader(c, CHIP, "compute")
    bf16, fp8, fp32 = num("peak_bf16_TFLOPs"), num("peak_fp8_TFLOPs"), num("peak_fp32_TFLOPs")
    units = num("compute_units")
    launch = num("launch_overhead_us")
    mm_max, mm_half = num("matmul_efficiency_max"), num("matmul_half_efficiency_GFLOP")
    grid = num("full_grid_gemm_share")
    c.finish()

    m = top.sub("memory")
    num = reader(m, CHIP, "memory")
    hbm, hbm_bw = num("hbm_capacity_GB"), num("hbm_bandwidth_GBps")
    hbm_eff, hbm_use = num("hbm_efficiency"), num("hbm_usable_fraction")
    llc, llc_bw = num("llc_capacity_MB"), num("llc_bandwidth_GBps")
    g_max, g_half = num("gather_efficiency_max"), num("gather_half_efficiency_row_bytes")
    m.finish()

    n = top.sub("nic")
    num = reader(n, CHIP, "nic")
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
    num = reader(su, CHIP, "scale_up")
    su_bw = num("bandwidth_GBps", required=not shared, default=None if not shared else 0.0)
    su_lat = num("latency_us", required=not shared, default=None if not shared else 0.0)
    su_eff = num("bandwidth_efficiency")
    su_kind = su.text("kind", SCALE_UP_KINDS, default=CHIP_OPTIONS["scale_up.kind"].default)
    nvls_eff = num("nvls_efficiency", required=False, default=su_eff)
    su.finish()
    if shared and su_bw:
        raise su.error("bandwidth_GBps", "must be absent when nic.serves_scale_up = true (the NIC carries scale-up)")

    o = top.sub("offload")
    num = reader(o, CHIP, "offload")
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
    num = reader(cc, CHIP, "core_collectives")
    cfrac, cmult = num("compute_fraction"), num("hbm_traffic_multiplier")
    cmsgs, dmult = num("messages_in_flight"), num("dma_hbm_traffic_multiplier")
    channels = num("channels", required=False, default=cmsgs)
    nvls_ch = num("nvls_channels")
    ll_max = num("ll_max_bus_GBps")
    call = num("call_overhead_us", required=False, default=launch / US)
    cc.finish()

    h = top.sub("host")
    num = reader(h, CHIP, "host")
    host_bw, dram = num("link_bandwidth_GBps"), num("dram_GB")
    host_step = num("step_overhead_us")
    h.finish()
    pw = top.sub("power")
    tdp = reader(pw, CHIP, "power")("tdp_W")
    pw.finish()
    pr = top.sub("price")
    usd = reader(pr, CHIP, "price")("usd_per_hour")
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
        locate("systems", name_or_path)          # says what was wrong
    text = str(name_or_path)
    p = Path(text)
    if p.suffix in (".toml", ".json") or exists(p):
        path = locate("systems", p)
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
    num = reader(top, SYSTEM, "")
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
        num = reader(s, SYSTEM, "network.levels[]")
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

    chip_path = locate("chips", chip_override if chip_override is not None else chip_name)
    chip_data, chip_src = read_file(chip_path), str(chip_path)
    if nic_over:        # the system's NICs (a node's, not the chip's: e.g. a cloud instance's EFA)
        chip_data = {**chip_data, "nic": {**chip_data.get("nic", {}), **nic_over}}
        chip_src = f"{chip_path} with the [nic] of {src}"
    chip, nic, off = parse_chip(chip_data, chip_src)
    lv = tuple(Level(latency_s=_f(lat), oversubscription=_f(over), size=size, link=link, name=lname,
                     switch_reduction=reduces)
               for size, link, lname, lat, over, reduces in levels)
    return System(chip=chip, nic=nic, offload=off, levels=lv, host_power_W=_f(host_W),
                  host_usd_per_hour=_f(host_usd), num_chips=n, chips_per_host=min(per_host, n),
                  name=f"{family}-{n}", files=(src, str(chip_path)))


def _near(n: int, step: int, most: int) -> str:
    """The sizes next to n that are whole multiples of `step` (at most `most`), as ' (e.g. 32 or 48)'."""
    near = [m for m in (n // step * step, (n // step + 1) * step) if 1 <= m <= most]
    return f" (e.g. {' or '.join(str(m) for m in near)})" if near else ""
