"""Hardware: Chip, Nic, Offload engines, network levels and the System (types), as pytrees of floats;
2D sparse parallelism's sharding groups (replication); the topology's counts and link rates
(topology); chip and system files (loading)."""

from .loading import CALIBRATED, architecture, load_chip, load_system, parse_chip
from .replication import replica_system, replication_problem, sharding_group, sync_every_problem, whole_system
from .topology import (capacity_bytes, domain_chips, level_latency_s, link_bandwidths, link_efficiencies, padded_sizes,
                       peers_per_level, present_in_domains)
from .types import Chip, Level, Nic, Offload, Replication, System

__all__ = ["CALIBRATED", "architecture", "Chip", "Level", "Nic", "Offload", "Replication", "System", "capacity_bytes", "domain_chips",
           "level_latency_s", "link_bandwidths", "link_efficiencies", "load_chip", "load_system", "padded_sizes",
           "parse_chip", "peers_per_level", "present_in_domains", "replica_system", "replication_problem",
           "sharding_group", "sync_every_problem", "whole_system"]
