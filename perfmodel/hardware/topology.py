"""The topology's counts and the links' rates: peers and chips per domain at each level (partial
last domains counted), each level's latency, the scale-up and scale-out line rates."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .types import Level, System


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
