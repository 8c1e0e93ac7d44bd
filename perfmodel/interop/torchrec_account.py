"""Why perfmodel and TorchRec's estimator disagree about a plan: an account, term by term.

    pm_terms = perfmodel_terms(system, model, plan)          # [D, 5] ms, TorchRec's five terms' counterparts
    acc = account(tr_terms, pm_terms, step_ms)               # one plan: TorchRec's estimate against perfmodel's step
    pair = account_pair((tr_a, pm_a, step_a), (tr_b, pm_b, step_b))   # two plans: the ratio A / B in each model

TorchRec's planner prices a plan as NoopPerfModel does: the busiest rank's sum over its shards of
`Perf.total` = fwd_compute + fwd_comms + bwd_compute + bwd_comms + prefetch_compute (ms, each from
EmbeddingPerfEstimator). perfmodel prices a step as a schedule (perfmodel.evaluate): per device the
same kinds of work, with their counterparts (TERMS, PERFMODEL_PHASES):

  fwd_compute       emb_fwd: the lookups and the pooled outputs' writes (launch included)
  fwd_comms         input_dist + output_dist: the indices' and the pooled outputs' collectives
  bwd_compute       emb_bwd: the gradient scatter, key preparation and fused optimizer update
  bwd_comms         grad_dist + the data-parallel tables' share of dense_sync (by bytes: the
                    tables' gradients among the dense ones all-reduced together)
  prefetch_compute  0: perfmodel prices a cached table's host traffic inside emb_fwd / emb_bwd
and one more, REST, that only perfmodel has: its step minus the busiest device's sum of those
counterparts (the dense layers, the optimizer, the overheads, less whatever overlap hides; it may
be negative). So TorchRec's estimate and perfmodel's step are one formula, max over ranks of a
sum of six players, TorchRec's figures (REST = 0) or perfmodel's.

The account swaps players from TorchRec's figures to perfmodel's: hybrid(S) is the busiest rank's
sum with the players in S at perfmodel's figures, plus REST if in S; hybrid({}) is TorchRec's
estimate, hybrid(all) perfmodel's step. Each player's Shapley share (`shapley`, the
average over the players' orders of what each one's swap changes) of the gap is its contribution:
  - ms: shares of TorchRec's estimate - perfmodel's step (they add up to it);
  - factor: shares of log(TorchRec / perfmodel), shown as factors whose product is the ratio (where
    every hybrid is positive; otherwise None).
For two plans A and B, the factor shares are of log((TR_A / TR_B) / (PM_A / PM_B)), the hybrid of
each plan taken with the same S: which players make TorchRec rate A against B differently from
perfmodel. The max over ranks makes the shares depend on the coalition (a term that moves the
busiest rank interacts with the others); Shapley's average over orders is what splits that.

"Disagree by 2x" (DISAGREE): a pair of plans whose ratio of ratios, (TR_A / TR_B) / (PM_A / PM_B),
is >= 2 or <= 1/2: the two models differ by 2x about how much better one plan is than the other;
and, per plan, TorchRec's estimate / perfmodel's step >= 2 or <= 1/2 (the two models measure
different spans, embeddings against a whole step, so this one is the weaker signal).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..shapley import shapley

TERMS = ("fwd_compute", "fwd_comms", "bwd_compute", "bwd_comms", "prefetch_compute")
REST = "dense_and_overlap"
PLAYERS = TERMS + (REST,)
PERFMODEL_PHASES = {"fwd_compute": "emb_fwd", "fwd_comms": "input_dist + output_dist", "bwd_compute": "emb_bwd",
                    "bwd_comms": "grad_dist + DP tables' share of dense_sync", "prefetch_compute": "(none)",
                    REST: "step - busiest device's sum of the above"}
DISAGREE = 2.0          # a factor: the models disagree where a ratio is >= DISAGREE or <= 1 / DISAGREE


def disagrees(ratio: float, factor: float = DISAGREE) -> bool:
    """Whether a ratio (of estimates, or of two plans' ratios) is `factor` or more away from 1."""
    return bool(ratio >= factor or ratio <= 1.0 / factor)


def hybrid(tr_terms, pm_terms, rest: float, coalition) -> float:
    """The busiest rank's sum of TERMS, those in `coalition` at perfmodel's figures and the others at
    TorchRec's, plus `rest` where REST is in it. tr_terms, pm_terms: [D, 5] (TERMS' order), ms."""
    tr, pm = np.asarray(tr_terms, np.float64), np.asarray(pm_terms, np.float64)
    take = np.array([t in coalition for t in TERMS])
    return float(np.max(np.where(take, pm, tr).sum(axis=1))) + (rest if REST in coalition else 0.0)


def _coalitions():
    return [frozenset(c) for r in range(len(PLAYERS) + 1) for c in itertools.combinations(PLAYERS, r)]


@dataclass(frozen=True)
class Account:
    """One plan (or a pair's ratio) in both models and each player's share of the gap.

    torchrec, perfmodel: TorchRec's estimate and perfmodel's step (ms; for a pair, the ratios A / B);
    ms: player -> share of torchrec - perfmodel (one plan only; None for a pair);
    factor: player -> factor, their product torchrec / perfmodel (None where a hybrid is <= 0)."""

    torchrec: float
    perfmodel: float
    ms: dict | None
    factor: dict | None

    @property
    def ratio(self) -> float:
        """TorchRec's figure / perfmodel's: the disagreement (1 = they agree)."""
        return self.torchrec / self.perfmodel

    def largest(self, n: int = 3) -> list[tuple[str, float]]:
        """The n players that move the ratio most, (player, factor), largest |log factor| first;
        by ms share (player, ms) where factors are undefined."""
        if self.factor is not None:
            return sorted(self.factor.items(), key=lambda kv: -abs(math.log(kv[1])))[:n]
        return sorted((self.ms or {}).items(), key=lambda kv: -abs(kv[1]))[:n]


def account(tr_terms, pm_terms, step_ms: float) -> Account:
    """The account of one plan: tr_terms, pm_terms [D, 5] ms per rank (TERMS), perfmodel's step (ms)."""
    rest = step_ms - float(np.max(np.asarray(pm_terms, np.float64).sum(axis=1)))
    h = {S: hybrid(tr_terms, pm_terms, rest, S) for S in _coalitions()}
    # value = what the swap removes from TorchRec's figure: the shares add up to TR - PM
    ms = shapley({S: -v for S, v in h.items()}, PLAYERS)
    factor = None
    if min(h.values()) > 0:
        logs = shapley({S: -math.log(v) for S, v in h.items()}, PLAYERS)
        factor = {p: math.exp(x) for p, x in logs.items()}
    return Account(h[frozenset()], h[frozenset(PLAYERS)], ms, factor)


def account_pair(a: tuple, b: tuple) -> Account:
    """The account of two plans' ratio, A / B: a, b = (tr_terms, pm_terms, step_ms) each. torchrec =
    TR_A / TR_B, perfmodel = PM_A / PM_B; factor: each player's share of (their quotient), the same
    coalition swapped in both plans."""
    rests = [step - float(np.max(np.asarray(pm, np.float64).sum(axis=1))) for _, pm, step in (a, b)]
    h = {S: (hybrid(a[0], a[1], rests[0], S), hybrid(b[0], b[1], rests[1], S)) for S in _coalitions()}
    full, none = frozenset(PLAYERS), frozenset()
    factor = None
    if min(min(v) for v in h.values()) > 0:
        logs = shapley({S: -math.log(va / vb) for S, (va, vb) in h.items()}, PLAYERS)
        factor = {p: math.exp(x) for p, x in logs.items()}
    return Account(h[none][0] / h[none][1], h[full][0] / h[full][1], None, factor)


def shard_seconds(system, model, plan) -> dict:
    """Per table, (forward, backward) seconds that one shard of it adds to its device's emb_fwd and
    emb_bwd in perfmodel (cost.embedding.embedding_costs' per-table terms for a 1D plan whose
    row-wise tables span every device): table-wise the whole lookup and its pooled output's write;
    column-wise one of k shards (width dim / k at the full batch) and 1/k of the output's write;
    row-wise 1/D of the lookup and the full batch's partial sums' write; table-row-wise 1/L (L the
    scale-up domain); data-parallel 1/D of lookup and write, plus the replica's dense update in the
    backward. A device's emb_fwd is its shards' sum plus the chip's launch time."""
    from ..cost import access
    from ..cost.arrays import as_numpy
    from ..cost.embedding import table_seconds

    chip, m = as_numpy(system.chip), as_numpy(model)
    tb = m.tables
    names = list(tb.names)
    D, L = system.num_chips, system.domain_size
    kind = [plan.tables[n].sharding_type for n in names]
    dp = np.array([s == "data_parallel" for s in kind])
    c = np.where(dp, 1.0, np.array([float(plan.tables[n].cache_ratio) for n in names]))
    k = np.array([len(plan.tables[n].ranks) if s == "column_wise" else 1 for n, s in zip(names, kind)], np.float64)
    mass = access.top_mass(tb, c)
    f_full, b_full = (np.asarray(x, np.float64) for x in table_seconds(chip, m, tb.dim, c, mass))
    f_cw, b_cw = (np.asarray(x, np.float64) for x in table_seconds(chip, m, tb.dim / k, c, mass))
    hbm = float(chip.hbm_Bps) * float(chip.hbm_eff)
    out_write = np.asarray(float(m.global_batch) * tb.output_per_sample() * tb.dim * tb.bytes_per_element / hbm,
                           np.float64)
    dp_bwd = np.asarray(2.0 * tb.rows * tb.bytes_per_row() / hbm, np.float64)
    out = {}
    for t, (n, s) in enumerate(zip(names, kind)):
        if s == "table_wise":
            f, b = f_full[t] + out_write[t], b_full[t] + out_write[t]
        elif s == "column_wise":
            f, b = f_cw[t] + out_write[t] / k[t], b_cw[t] + out_write[t] / k[t]
        elif s == "row_wise":
            f, b = f_full[t] / D + out_write[t], b_full[t] / D + out_write[t]
        elif s == "table_row_wise":
            f, b = f_full[t] / L + out_write[t], b_full[t] / L + out_write[t]
        else:
            f, b = (f_full[t] + out_write[t]) / D, (b_full[t] + out_write[t]) / D + dp_bwd[t]
        out[n] = (float(f), float(b))
    return out


def perfmodel_terms(system, model, plan, bd=None) -> np.ndarray:
    """[D, 5] ms: per device, perfmodel's counterparts of TERMS (the module docstring) for a 1D plan.
    bd: the plan's Breakdown where the caller has it."""
    from ..cost.arrays import as_numpy
    from ..cost.traffic import plan_traffic
    from ..evaluate import evaluate
    from ..plan import to_arrays

    bd = evaluate(system, model, plan) if bd is None else bd
    ph = {k: np.asarray(v, np.float64) for k, v in bd.phase_s.items()}
    tr = plan_traffic(as_numpy(system), as_numpy(model), as_numpy(to_arrays(plan, system, model)))
    dp, dense = float(np.asarray(tr.emb.dp_grad_bytes)), float(np.asarray(tr.grad_bytes))
    dp_share = dp / (dp + dense) if dp + dense > 0 else 0.0
    zero = np.zeros_like(ph["emb_fwd"])
    cols = [ph["emb_fwd"], ph["input_dist"] + ph["output_dist"], ph["emb_bwd"],
            ph["grad_dist"] + dp_share * ph["dense_sync"], zero]
    return np.stack(cols, axis=1) * 1e3
