"""The System's leaves as a study reads them: each leaf's name, unit and knob (leaf_info), and the
gradient of a metric's log with respect to all of them in one reverse pass (log_gradient) — what the
sensitivity table and the sweep's binding resource are computed from.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..cache import jit
from ..evaluate import evaluate
from ..hardware import GB, GBPS, TF, US, System
from ..schema import SYSTEM_LEAVES

# leaf path -> (what it is, unit, SI per unit, knob that sweeps it or "")
LEAVES = {
    "chip.peak_bf16_flops": ("peak bf16 compute", "TFLOP/s", TF, "peak_bf16_TFLOPs"),
    "chip.peak_fp8_flops": ("peak fp8 compute", "TFLOP/s", TF, "peak_fp8_TFLOPs"),
    "chip.peak_fp32_flops": ("peak fp32 compute", "TFLOP/s", TF, "peak_fp32_TFLOPs"),
    "chip.compute_units": ("compute units (cores / SMs)", "", 1.0, ""),
    "chip.launch_s": ("kernel launch overhead", "us", US, "launch_overhead_us"),
    "chip.matmul_eff_max": ("GEMM efficiency, large GEMMs", "", 1.0, "matmul_efficiency_max"),
    "chip.matmul_half_flop": ("GEMM size at half efficiency", "GFLOP", 1e9, ""),
    "chip.hbm_bytes": ("HBM capacity", "GB", GB, "hbm_capacity_GB"),
    "chip.hbm_Bps": ("HBM bandwidth", "GB/s", GBPS, "hbm_bandwidth_GBps"),
    "chip.hbm_eff": ("HBM achievable fraction", "", 1.0, ""),
    "chip.hbm_usable": ("HBM usable fraction", "", 1.0, ""),
    "chip.llc_bytes": ("last-level cache capacity", "MB", 1e6, ""),
    "chip.llc_Bps": ("last-level cache bandwidth", "GB/s", GBPS, ""),
    "chip.gather_eff_max": ("embedding gather efficiency, large rows", "", 1.0, ""),
    "chip.gather_half_row_bytes": ("row size at half gather efficiency", "B", 1.0, ""),
    "chip.scale_up_Bps": ("dedicated scale-up link bandwidth (NVLink)", "GB/s", GBPS, "scale_up_bandwidth_GBps"),
    "chip.scale_up_latency_s": ("dedicated scale-up link latency", "us", US, ""),
    "chip.core_compute_fraction": ("compute share of a core-driven collective", "", 1.0,
                                   "core_collective_compute_fraction"),
    "chip.core_hbm_mult": ("HBM bytes per network byte, core-driven", "", 1.0, "core_collective_hbm_multiplier"),
    "chip.core_msgs_in_flight": ("messages in flight, core-driven", "", 1.0, ""),
    "chip.dma_hbm_mult": ("HBM bytes per network byte, engine DMA", "", 1.0, ""),
    "chip.host_link_Bps": ("chip-host link bandwidth", "GB/s", GBPS, "host_link_bandwidth_GBps"),
    "chip.host_dram_bytes": ("host DRAM per chip", "GB", GB, ""),
    "chip.tdp_W": ("chip TDP", "W", 1.0, ""),
    "chip.scale_up_eff": ("scale-up link achievable fraction", "", 1.0, ""),
    "nic.bandwidth_eff": ("NIC achievable fraction of line rate", "", 1.0, ""),
    "chip.usd_per_hour": ("chip price", "$/h", 1.0, "chip_usd_per_hour"),
    "nic.pcie": ("NIC behind PCIe (0 integrated, 1 PCIe)", "", 1.0, "nic_attach_pcie"),
    "nic.active_ports": ("active NIC ports", "", 1.0, "nic_bandwidth_GBps"),
    "nic.port_Bps": ("NIC port bandwidth", "GB/s", GBPS, "nic_bandwidth_GBps"),
    "nic.scale_up_fraction": ("NIC share on scale-up", "", 1.0, "nic_scale_up_fraction"),
    "nic.latency_s": ("NIC latency per message", "us", US, "nic_latency_us"),
    "nic.per_message_s": ("host / proxy cost per message", "us", US, "nic_per_message_overhead_us"),
    "nic.pcie_Bps": ("PCIe bandwidth in front of the NIC", "GB/s", GBPS, "pcie_bandwidth_GBps"),
    "nic.pcie_latency_s": ("PCIe latency per message", "us", US, "pcie_latency_us"),
    "offload.engines": ("offload engines", "", 1.0, "offload_engines"),
    "offload.clock_Hz": ("offload engine clock", "GHz", 1e9, ""),
    "offload.reduce_bytes_per_cycle": ("engine reduce bytes/cycle, one busy", "B", 1.0, ""),
    "offload.reduce_bytes_per_cycle_all_busy": ("engine reduce bytes/cycle, all busy", "B", 1.0, ""),
    "offload.setup_s": ("engine setup per collective", "us", US, "engine_setup_us"),
    "offload.msgs_per_engine": ("messages in flight per engine", "", 1.0, ""),
    "host_power_W": ("host power (accelerators included)", "W", 1.0, "host_power_W"),
    "host_usd_per_hour": ("host price", "$/h", 1.0, ""),
}
LEVEL_LEAVES = {
    "latency_s": ("wire + switch latency", "us", US, "{link}_latency_us"),
    "oversubscription": ("oversubscription", "", 1.0, "{link}_oversubscription"),
}


def leaf_info(system: System) -> list[tuple[str, str, str, float, str]]:
    """(path, name, unit, SI per unit, knob) for every System leaf, in tree_leaves order."""
    paths, _ = jax.tree_util.tree_flatten_with_path(system)
    out = []
    for path, _ in paths:
        keys = []
        for p in path:
            keys.append(str(p.name) if hasattr(p, "name") else f"[{p.idx}]" if hasattr(p, "idx") else str(p))
        dotted = ".".join(keys).replace(".[", "[")
        if dotted.startswith("levels["):
            i = int(dotted[len("levels["):dotted.index("]")])
            lv = system.levels[i]
            attr = dotted.split(".")[-1]
            name, unit, scale, kn = LEVEL_LEAVES.get(attr, (attr, "", 1.0, ""))
            kn = kn.format(link=lv.link)
            if kn == "scale_up_oversubscription":
                kn = ""
            out.append((dotted, f"{lv.name} level ({lv.link}) {name}", unit, scale, kn))
        elif dotted in LEAVES:
            name, unit, scale, kn = LEAVES[dotted]
            out.append((dotted, name, unit, scale, kn))
        else:                         # the config field that sets the leaf names it, in the file's unit
            f = SYSTEM_LEAVES.get(dotted)
            out.append((dotted, f.meaning or f.name, f.unit, f.scale, "") if f else (dotted, dotted, "", 1.0, ""))
    return out


# quick: one call per table, so its compile is most of its cost (cache.QUICK_COMPILE_OPTIONS, as for
# pm.evaluate's program)
@jit(static_argnames=("metric",), quick=True)
def log_gradient(system, model, plan, metric):
    """The metric and the gradient of its log w.r.t. the System (one reverse pass; a compile per metric)."""
    def f(s):
        return jnp.log(getattr(evaluate(s, model, plan), metric))
    value, grad = jax.value_and_grad(f)(system)
    return jnp.exp(value), grad
