"""perfmodel's 2D plans against TorchRec's DMPCollection (2D sparse parallelism), in the environment of
benchmarks/torchrec_env.sh; not part of `make test`:

    make torchrec-test

  1. The plan of one sharding group is, shard for shard, what construct_module_sharding_plan builds
     for the group (world_size = the group's chips, local_size = its scale-up domain's), as
     DMPCollection wants it ("created for sharding group world size").
  2. DMPCollection's own remapping of that plan (_remap_sharding_plan, both layouts) puts each
     shard where perfmodel's model of the layout says: the replicas of a shard on the ranks
     hardware.replica_system describes (strided: R neighbouring ranks, inside one rack when R
     divides it), and each group's ranks spread over the levels hardware.sharding_group gives it.
"""

import copy

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchrec.distributed.model_parallel")

import perfmodel as pm  # noqa: E402
from perfmodel import TablePlan  # noqa: E402
from perfmodel.hardware import replica_system, sharding_group  # noqa: E402
from torchrec import EmbeddingBagCollection  # noqa: E402
from torchrec.distributed import model_parallel as mp  # noqa: E402
from torchrec.distributed import sharding_plan as sp  # noqa: E402

from test_torchrec_plan import assert_same, configs_of, generator  # noqa: E402

MODULE = "sparse_arch.embedding_bag_collection"


def case(replicas, layout):
    system, model = pm.load_system("mtia300-64"), pm.load_model("dlrm-small")
    G = 64 // replicas
    group = sharding_group(system, replicas, layout)
    L = group.domain_size
    kinds = [("table_wise", [3 % G]), ("column_wise", [0, G - 1]), ("row_wise", list(range(G))),
             ("table_row_wise", list(range(L, 2 * L)) if G >= 2 * L else list(range(G))),
             ("data_parallel", list(range(G))), ("table_wise", [G - 1]), ("table_wise", [1]), ("table_wise", [2 % G])]
    if G < 2 * L:            # one domain in the group: table_row_wise is row_wise there
        kinds[3] = ("row_wise", list(range(G)))
    plan = pm.Plan({n: TablePlan(st, r) for n, (st, r) in zip(model.tables.names, kinds)},
                   replicas=replicas, group_layout=layout)
    return system, model, plan, group


CASES = [(4, "strided"), (32, "strided"), (2, "contiguous")]


@pytest.mark.parametrize("replicas,layout", CASES)
def test_group_plan_is_construct_module_sharding_plan_for_the_group(replicas, layout):
    system, model, plan, group = case(replicas, layout)
    data = pm.torchrec_plan(plan, system, model)
    args = pm.dmp_collection_args(data)
    G, L = group.num_chips, group.domain_size
    assert (args["world_size"], args["sharding_group_size"]) == (64, G)
    assert args["use_inter_host_allreduce"] == (layout == "contiguous")
    ebc = EmbeddingBagCollection(tables=configs_of(model), device=torch.device("meta"))
    theirs = sp.construct_module_sharding_plan(
        ebc, {n: generator(plan.tables[n], L) for n in model.tables.names}, local_size=L, world_size=G,
        device_type="cuda")
    ours = args["plan"].plan[MODULE]
    for name in model.tables.names:
        if plan.tables[name].sharding_type == "table_row_wise":
            theirs[name].compute_kernel = pm.plan.compute_kernel("table_row_wise", 1.0)
        assert_same(ours[name], theirs[name], name)


class _Device:
    type = "cuda"


@pytest.mark.parametrize("replicas,layout", CASES)
def test_dmp_collection_places_the_replicas_as_perfmodel_prices_them(replicas, layout, monkeypatch):
    system, model, plan, group = case(replicas, layout)
    args = pm.dmp_collection_args(pm.torchrec_plan(plan, system, model))
    monkeypatch.setattr(mp, "get_local_size", lambda *a: 16)          # a rack of 16 as a host
    fake = type("DMP", (), {"_device": _Device()})()
    D, G, R = 64, args["sharding_group_size"], replicas
    placed, groups = {}, set()                   # group rank -> its shard's global ranks; the groups
    for rank in range(D):                        # every rank remaps the group's plan to its own group
        remapped = copy.deepcopy(args["plan"])
        mp.DMPCollection._remap_sharding_plan(fake, remapped, rank, D // G, G, args["use_inter_host_allreduce"])
        ranks = remapped.plan[MODULE]["c2"].ranks          # c2: row_wise over the whole group
        assert len(set(ranks)) == G and rank in ranks
        groups.add(tuple(ranks))
        for j, r in enumerate(ranks):
            placed.setdefault(j, set()).add(r)
    assert len(groups) == R and sorted(r for g in groups for r in g) == list(range(D))
    rack = lambda r: r // 16
    reps = replica_system(group)
    for j, replicas_of_j in placed.items():
        assert len(replicas_of_j) == R
        # a shard's replicas sit in one rack exactly when perfmodel syncs them on the rack's links alone
        assert (len({rack(r) for r in replicas_of_j}) == 1) == ([lv.name for lv in reps.levels] == ["rack"])
    # each group holds as many ranks of each rack it reaches as perfmodel's group system gives its innermost level
    for members in groups:
        per_rack = [sum(rack(r) == k for r in members) for k in {rack(r) for r in members}]
        inner = group.levels[0].size if group.levels[0].name == "rack" else 1
        assert per_rack == [inner] * len(per_rack)
