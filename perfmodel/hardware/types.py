"""The hardware's types: Chip, Nic, Offload engines, network Levels and the System, as pytrees of
floats.

Every number is an SI array leaf (FLOP/s, bytes, bytes/s, seconds, watts), so `jax.grad` of a step
time with respect to a System gives d step / d every hardware parameter. Structure (how many chips,
which network levels exist, whether the NIC also carries scale-up traffic) is static.

The schema's rows are the fields: a row whose leaf is `chip.<name>` makes Chip a field <name> (a
float leaf for a number, static text or a flag for a word), and so for `nic.`, `offload.`,
`levels[].` and the System's own; what each holds is in its row (schema.py, docs/configuration.md).
The fields the rows make are keyword-only and required; the loaders fill every one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import jax  # noqa: F401  (the fields the rows make are annotated jax.Array)

from ..pytree import pytree, static
from ..schema import CHIP, CHIP_OPTIONS, SYSTEM, SYSTEM_OPTIONS, Field


def rows_of(owner: str, *tables) -> list:
    """The schema rows (Field or Option) whose leaf is `owner`.<name>, in row order (owner "" : the
    System's own, "levels[]": a Level's)."""
    return [row for table in tables for row in table.values()
            if row.leaf is not None and row.leaf.rpartition(".")[0] == owner]


def from_rows(owner: str, *tables):
    """Class decorator, under @dataclass: a keyword-only field for every row of rows_of(owner)."""
    def add(cls):
        notes = dict(cls.__dict__.get("__annotations__", {}))
        for row in rows_of(owner, *tables):
            name = row.leaf.rpartition(".")[2]
            assert name not in notes, (cls.__name__, name)
            if isinstance(row, Field) or row.index:
                notes[name] = "jax.Array"
                setattr(cls, name, field(kw_only=True, metadata={"row": row.name}))
            else:
                notes[name] = "bool" if row.kind == "flag" else "str"
                setattr(cls, name, static(kw_only=True, metadata={"row": row.name}))
        cls.__annotations__ = notes
        return cls
    return add


@pytree
@dataclass(frozen=True)
@from_rows("chip", CHIP, CHIP_OPTIONS)
class Chip:
    """One accelerator: compute, memory, efficiency curves, and how core-driven collectives behave
    (its fields: schema.CHIP's rows whose leaf is chip.<name>)."""


@pytree
@dataclass(frozen=True)
@from_rows("nic", CHIP, CHIP_OPTIONS)
class Nic:
    """The chip's NICs: bandwidth, how they attach (pcie: 1.0 behind PCIe, 0.0 integrated, a blend in
    between), whether they carry scale-up too (schema.CHIP's rows whose leaf is nic.<name>)."""


@pytree
@dataclass(frozen=True)
@from_rows("offload", CHIP, CHIP_OPTIONS)
class Offload:
    """Collective-offload (message) engines. engines = 0: collectives run on the compute cores
    (schema.CHIP's rows whose leaf is offload.<name>)."""


@pytree
@dataclass(frozen=True)
@from_rows("levels[]", SYSTEM, SYSTEM_OPTIONS)
class Level:
    """One network level: a domain of `size` chips joined by the `link` ("scale_up" | "scale_out"); its
    switches may reduce (switch_reduction: scale-up NVLS, scale-out SHARP). Its other fields: schema.SYSTEM's
    rows whose leaf is levels[].<name>."""

    size: int = static(default=1)


@pytree
@dataclass(frozen=True)
@from_rows("", SYSTEM, SYSTEM_OPTIONS)
class System:
    """A cluster: num_chips chips, chips_per_host per host, network levels from the innermost out.

    The chips are a prefix of the smallest full system holding them (padded_sizes): every domain
    is full but the last of each level, which holds what is left (`partial`, `domain_sizes`); a
    level's `size` is its full domain's (the outermost: num_chips). Its host's numbers: schema.SYSTEM's
    top-level rows with a leaf."""

    chip: Chip
    nic: Nic
    offload: Offload
    levels: tuple[Level, ...]
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
