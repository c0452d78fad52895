"""Mixture-of-experts dispatch and combine for ``synth run`` (no torch here; data.py builds the reference).

A ``moe_dispatch`` / ``moe_combine`` schedule (synth.moe) names one chunk per token, tokens numbered
rank by rank. The caller's buffers hold tokens as rows of E elements (E = token bytes / element size):

- dispatch: rank r's input is its own tokens in order ([tokens of r, E]); its output is one row per
  token routed to r (a destination: a rank hosting one of the token's experts, r's own tokens
  included), in global token order;
- combine: rank r's input is one row per token routed to r, in that same order (what r's experts
  computed); its output is one row per token of r: the sum over the token's destinations of their rows.

The Program is lowered with exactly that layout (``moe_layout``: token k of a rank's input at offset
k of its input buffer, row k of its output at offset k of its output buffer), so the binding is the
identity and the caller's tensors are the Program's buffers. A relay or landing rank that holds
nothing of a token receives its first partial sum as a copy (synth.lower.plan), so nothing starts
from an unwritten slot. The size of a run is the one the routing fixes (``Collective.size_bytes``:
the most tokens on a rank x the token's bytes); synth.runtime.runnable.run_sizes refuses another.

>>> from synth.core.collective import Collective
>>> coll = Collective("moe_dispatch", 2, False, [{0}, {0}, {1}], [{0, 1}, {1}, {0}], 2, chunk_bytes=64)
>>> t = MoeTokens.of(coll, "x")
>>> t.input_tokens(0), t.output_tokens(0), t.output_tokens(1), t.pairs()
((0, 1), (0, 2), (0, 1), ((0, 0), (0, 1), (1, 1), (2, 0)))
>>> t.where(1, 5, 4)  # rank 1's output element 5, 4 elements a token
'row 1 (token 1: rank 0 token 1), element 1'
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from synth.core.collective import Collective
from synth.core.errors import InputError

MOE = ("moe_dispatch", "moe_combine")


@dataclass(frozen=True)
class MoeTokens:
    """The tokens of a dispatch or combine: ``sources[t]`` the rank token t belongs to (tokens
    numbered rank by rank), ``destinations[t]`` the ranks it is routed to, ascending."""

    kind: str
    ranks: int
    sources: tuple[int, ...]
    destinations: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, coll: Collective, source: str) -> "MoeTokens":
        """The tokens of a moe collective; InputError (one line) when a token does not belong to
        exactly one rank or the tokens are not numbered rank by rank."""
        dispatch = coll.name == "moe_dispatch"
        own, routed = (coll.pre, coll.post) if dispatch else (coll.post, coll.pre)
        side = "starts on" if dispatch else "ends on"
        sources = []
        for t, ranks in enumerate(own):
            if len(ranks) != 1:
                raise InputError(f"{source}: {coll.name} token {t} {side} {len(ranks)} ranks; a token belongs "
                                 "to exactly one rank")
            (rank,) = ranks
            if sources and rank < sources[-1]:
                raise InputError(f"{source}: {coll.name} token {t} belongs to rank {rank} but token {t - 1} to "
                                 f"rank {sources[-1]}; tokens must be numbered rank by rank")
            sources.append(rank)
        return cls(coll.name, coll.ranks, tuple(sources), tuple(tuple(sorted(d)) for d in routed))

    @cached_property
    def _own(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.ranks)]
        for t, s in enumerate(self.sources):
            out[s].append(t)
        return tuple(map(tuple, out))

    @cached_property
    def _received(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.ranks)]
        for t, ranks in enumerate(self.destinations):
            for r in ranks:
                out[r].append(t)
        return tuple(map(tuple, out))

    def own(self, rank: int) -> tuple[int, ...]:
        """The tokens of ``rank``, in order."""
        return self._own[rank]

    def received(self, rank: int) -> tuple[int, ...]:
        """The tokens routed to ``rank`` (it is one of their destinations), in token order."""
        return self._received[rank]

    def input_tokens(self, rank: int) -> tuple[int, ...]:
        """The token of each row of ``rank``'s input: its own (dispatch), those routed to it (combine)."""
        return self.own(rank) if self.kind == "moe_dispatch" else self.received(rank)

    def output_tokens(self, rank: int) -> tuple[int, ...]:
        """The token of each row of ``rank``'s output: those routed to it (dispatch), its own (combine)."""
        return self.received(rank) if self.kind == "moe_dispatch" else self.own(rank)

    def pairs(self) -> tuple[tuple[int, int], ...]:
        """(token, rank) of every destination, sorted by token then rank."""
        return tuple((t, r) for t, ranks in enumerate(self.destinations) for r in ranks)

    def where(self, rank: int, index: int, chunk: int) -> str:
        """Element ``index`` of ``rank``'s flat output (``chunk`` elements a row), in tokens."""
        row, element = divmod(index, max(1, chunk))
        tokens = self.output_tokens(rank)
        if row >= len(tokens):
            return f"element {index} (past the last of its {len(tokens)} rows)"
        t = tokens[row]
        s = self.sources[t]
        return f"row {row} (token {t}: rank {s} token {self.own(s).index(t)}), element {element}"


def moe_layout(tokens: MoeTokens, buffer_chunks: int):
    """The lowering's buffer layout (synth.lower.layout.Layout) for ``tokens``: a rank's k-th input
    row at input offset k, its k-th output row at output offset k (every rank's buffers as long as
    the longest rank's; ``program_sizes`` trims them)."""
    from synth.lower.layout import Layout

    ins, outs = {}, {}
    for r in range(tokens.ranks):
        ins.update({(r, t): ("i", k) for k, t in enumerate(tokens.input_tokens(r))})
        outs.update({(r, t): ("o", k) for k, t in enumerate(tokens.output_tokens(r))})
    most_in = max(len(tokens.input_tokens(r)) for r in range(tokens.ranks))
    most_out = max(len(tokens.output_tokens(r)) for r in range(tokens.ranks))
    return Layout(buffer_chunks, max(1, most_in), max(1, most_out), ins, outs, False)


def lower_moe(schedule, tokens: MoeTokens, options=None):
    """The Program of a verified moe schedule, lowered with ``moe_layout`` under ``options`` (a
    LoweringOptions, always out of place; None: one channel per link unit, as ``synth export`` does
    by default), each rank's buffers exactly its rows."""
    from synth.lower.lowering import LoweringOptions, lower

    layout = moe_layout(tokens, schedule.collective.buffer_chunks)
    options = replace(options or LoweringOptions(), inplace=False)
    program = lower(schedule, options, layout=layout)
    gpus = tuple(replace(g, input_chunks=len(tokens.input_tokens(g.rank)),
                         output_chunks=len(tokens.output_tokens(g.rank))) for g in program.gpus)
    return replace(program, gpus=gpus)
