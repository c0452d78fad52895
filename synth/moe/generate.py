"""Synthetic mixture-of-experts routings (``synth routing make``): not traces of a real model.

- Experts are placed in contiguous blocks: expert e on rank ``e * ranks // experts``.
- Popularity: ``uniform`` (every expert equally likely) or ``zipf:S`` (the k-th most popular
  expert has weight k^-S; which experts are popular is a seeded shuffle, so hot experts land on
  random ranks and machines).
- Each token picks ``topk`` distinct experts with probability proportional to weight, without
  replacement (Gumbel top-k: the k largest of log(weight) + Gumbel noise).
- ``imbalance`` F: tokens per rank are uneven; one seeded rank (the busiest) has F times the mean,
  the others share the rest by seeded Gamma(16) weights (none above the busiest). F = 1: every rank has ``tokens``.
- ``max_machines`` M (node-limited routing, as DeepSeek-V3 trains): a token first keeps the M
  machines (``machine_ranks`` ranks each) holding its highest-scoring experts, then takes its
  top-k among their experts.

Deterministic for a seed (numpy's PCG64).

>>> r = make_routing(8, 32, 4, 16, 128, "zipf:1.2", seed=1, imbalance=2.0)
>>> int(r.tokens_per_rank.max()), r.tokens, int(np.diff(r.expert_ptr).max())
(32, 128, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from synth.core.errors import InputError
from synth.core.routing import Routing

GAMMA_SHAPE = 16.0  # spread of the non-busiest ranks' token counts under an imbalance


@dataclass(frozen=True)
class Popularity:
    """``uniform`` or ``zipf`` with exponent ``s``."""

    kind: str
    s: float = 0.0

    @classmethod
    def parse(cls, text: str) -> "Popularity":
        if text == "uniform":
            return cls("uniform")
        kind, _, value = text.partition(":")
        try:
            exponent = float(value)
        except ValueError:
            exponent = math.nan
        if kind != "zipf" or not math.isfinite(exponent) or exponent <= 0:
            raise InputError(f"--popularity: expected uniform or zipf:S with S > 0, got {text!r}")
        return cls("zipf", exponent)

    def weights(self, experts: int, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "uniform":
            return np.ones(experts)
        weights = np.arange(1, experts + 1, dtype=float) ** -self.s
        return weights[rng.permutation(experts)]


def make_routing(ranks: int, experts: int, topk: int, tokens: int, token_bytes: int, popularity: str,
                 seed: int = 0, imbalance: float = 1.0, max_machines: int | None = None,
                 machine_ranks: int = 8) -> Routing:
    """A seeded synthetic routing (see the module docstring); InputError for impossible options."""
    _check(ranks, experts, topk, tokens, token_bytes, imbalance, max_machines, machine_ranks)
    rng = np.random.default_rng(seed)
    placed = np.arange(experts, dtype=np.int64) * ranks // experts
    log_weight = np.log(Popularity.parse(popularity).weights(experts, rng)).astype(np.float32)
    counts = token_counts(ranks, tokens, imbalance, rng)
    machine = placed // machine_ranks if max_machines else None
    chosen = [_top_k(log_weight, int(count), topk, rng, machine, max_machines) for count in counts]
    ids = np.concatenate(chosen) if chosen else np.zeros((0, topk), dtype=np.int64)
    source = np.repeat(np.arange(ranks, dtype=np.int64), counts)
    ptr = np.arange(len(source) + 1, dtype=np.int64) * topk
    return Routing(ranks, token_bytes, placed, source, ptr, ids.reshape(-1).astype(np.int64))


def token_counts(ranks: int, tokens: int, imbalance: float, rng: np.random.Generator) -> np.ndarray:
    """Tokens per rank: ``tokens`` each, or with ``imbalance`` F one rank at F x the mean and the
    rest shared by Gamma weights (largest remainders, so the total stays ranks x tokens)."""
    if imbalance == 1.0 or ranks == 1:
        return np.full(ranks, tokens, dtype=np.int64)
    total = ranks * tokens
    busiest = int(round(imbalance * tokens))
    share = _capped_shares(rng.gamma(GAMMA_SHAPE, size=ranks - 1), total - busiest, busiest)
    rest = np.floor(share).astype(np.int64)
    room = np.flatnonzero(rest < busiest)
    order = room[np.argsort((rest - share)[room], kind="stable")]  # largest remainders first
    rest[order[:total - busiest - int(rest.sum())]] += 1
    counts = np.insert(rest, 0, busiest)
    return counts[np.argsort(rng.permutation(ranks))]  # the busiest at a seeded rank


def _capped_shares(weights: np.ndarray, total: float, cap: float) -> np.ndarray:
    """``total`` split in proportion to ``weights``, no share above ``cap`` (the excess goes to
    the others, in proportion)."""
    share = np.zeros_like(weights)
    free = np.ones(len(weights), dtype=bool)
    left = total
    while left > 1e-9 and free.any():
        share[free] += left * weights[free] / weights[free].sum()
        over = share > cap
        left = float((share[over] - cap).sum())
        share[over] = cap
        free &= ~over
    return share


def _top_k(log_weight: np.ndarray, count: int, topk: int, rng: np.random.Generator,
           machine: np.ndarray | None, max_machines: int | None) -> np.ndarray:
    """``count`` tokens' experts [count, topk], sorted, by Gumbel top-k (node-limited with ``machine``)."""
    if count == 0:
        return np.zeros((0, topk), dtype=np.int64)
    keys = log_weight[None, :] + rng.gumbel(size=(count, len(log_weight))).astype(np.float32)
    if machine is not None and max_machines < int(machine.max()) + 1:
        keys = _node_limited(keys, machine, max_machines)
    top = np.argpartition(-keys, topk - 1, axis=1)[:, :topk]
    return np.sort(top, axis=1)


def _node_limited(keys: np.ndarray, machine: np.ndarray, max_machines: int) -> np.ndarray:
    """``keys`` with every expert outside a token's ``max_machines`` best machines (by their best
    expert's key) set to -inf."""
    starts = np.flatnonzero(np.r_[True, machine[1:] != machine[:-1]])
    best = np.maximum.reduceat(keys, starts, axis=1)  # [tokens, machines]
    kept = np.argpartition(-best, max_machines - 1, axis=1)[:, :max_machines]
    allowed = np.zeros_like(best, dtype=bool)
    np.put_along_axis(allowed, kept, True, axis=1)
    return np.where(allowed[:, machine], keys, -np.inf).astype(np.float32)


def _check(ranks, experts, topk, tokens, token_bytes, imbalance, max_machines, machine_ranks) -> None:
    for name, value in (("--ranks", ranks), ("--experts", experts), ("--topk", topk), ("--tokens", tokens),
                        ("--token-bytes", token_bytes), ("--machine-ranks", machine_ranks)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if topk > experts:
        raise InputError(f"--topk {topk} is more than the {experts} experts")
    if not math.isfinite(imbalance) or not 1.0 <= imbalance <= ranks:
        raise InputError(f"--imbalance must be between 1 and the rank count ({ranks}), got {imbalance}")
    if max_machines is not None:
        if not isinstance(max_machines, int) or max_machines < 1:
            raise InputError(f"--max-machines must be a positive integer, got {max_machines!r}")
        if ranks % machine_ranks:
            raise InputError(f"--max-machines needs whole machines: {ranks} ranks are not a multiple of "
                             f"--machine-ranks {machine_ranks}")
        per_machine = experts * machine_ranks // ranks
        if topk > max_machines * per_machine:
            raise InputError(f"--topk {topk} cannot fit in {max_machines} machine(s) of {per_machine} experts each")
