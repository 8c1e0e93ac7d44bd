"""Shapley values of a cooperative game: each player's share of what the grand coalition is worth,
its marginal worth averaged over every order of the players joining (Shapley 1953). The attribution
of a step's gap to hardware factors (analysis.attribution) and the account of TorchRec's and
perfmodel's disagreement (interop.torchrec_account) split their differences this way."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping


def shapley(value: Mapping[frozenset, float], players) -> dict:
    """Shapley value of each player of the game `value` (coalition -> worth, every subset given)."""
    players = list(players)
    k = len(players)
    out = {}
    for f in players:
        rest = [g for g in players if g != f]
        total = 0.0
        for r in range(k):
            w = math.factorial(r) * math.factorial(k - r - 1) / math.factorial(k)
            for S in itertools.combinations(rest, r):
                total += w * (value[frozenset(S) | {f}] - value[frozenset(S)])
        out[f] = total
    return out
