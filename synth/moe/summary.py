"""What a routing asks of a machine, in numbers (``synth routing show``).

Per token: the destination ranks (experts' ranks, once each) and, on a topology, the other
machines it must enter. ``dedup`` is what DeepEP-style forwarding saves: the network copies a
one-copy-per-rank all_to_all_v sends (remote destination ranks) over the crossings needed (one per
token and remote machine). ``hottest_rank_share``: the tokens the busiest destination rank needs,
over all tokens.

>>> from synth.core.routing import Routing
>>> r = Routing.of(4, 64, [0, 1, 2, 3], [[[1, 2, 3]], [], [], []])
>>> s = summarize(r, [[0, 1], [2, 3]])
>>> s["destinations_per_token"], s["remote_machines_per_token"], s["dedup"]
(3.0, 1.0, 2.0)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from synth.core.routing import Routing


def summarize(routing: Routing, machines: Sequence[Sequence[int]] | None = None) -> dict:
    """Figures of ``routing``; with ``machines`` (rank lists) the machine-level ones too."""
    token, rank = routing.destination_pairs()
    per_rank = routing.tokens_per_rank
    doc = {
        "ranks": routing.ranks, "experts": len(routing.experts), "tokens": routing.tokens,
        "token_bytes": routing.token_bytes, "size_bytes": int(per_rank.max()) * routing.token_bytes,
        "tokens_per_rank": {"min": int(per_rank.min()), "mean": float(per_rank.mean()), "max": int(per_rank.max())},
        "experts_per_token": float(np.diff(routing.expert_ptr).mean()),
        "destinations_per_token": float(len(token) / routing.tokens),
        "hottest_rank_share": float(np.bincount(rank, minlength=routing.ranks).max() / routing.tokens),
    }
    if machines:
        doc.update(_machine_figures(routing, token, rank, machines))
    return doc


def _machine_figures(routing: Routing, token: np.ndarray, rank: np.ndarray, machines) -> dict:
    machine_of = np.zeros(routing.ranks, dtype=np.int64)
    for index, members in enumerate(machines):
        machine_of[list(members)] = index
    source_machine = machine_of[routing.token_source[token]]
    remote = machine_of[rank] != source_machine
    crossing = np.unique(token[remote] * len(machines) + machine_of[rank[remote]])  # (token, machine) keys
    crossings = len(crossing)
    entering = np.bincount(crossing % len(machines), minlength=len(machines))
    return {
        "machines": len(machines),
        "remote_machines_per_token": crossings / routing.tokens,
        "remote_ranks_per_token": float(remote.sum() / routing.tokens),
        "dedup": float(remote.sum() / crossings) if crossings else 1.0,
        "hottest_machine_share": float(entering.max() / max(1, entering.mean())) if crossings else 1.0,
    }
