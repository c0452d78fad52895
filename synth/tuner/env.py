"""The tuner table as ``NCCL_ALGO`` / ``NCCL_PROTO`` settings, and what those cannot say.

Since NCCL 2.24.3 both take per-collective lists (``allreduce:ring,tree;allgather:ring``;
shared/reference/nccl-tuner.md, 8.1): they remove options for every size, and NCCL's own model
still chooses among what is left per size. They cannot set where one option takes over from
another, nor a channel count per call (``NCCL_MIN_NCHANNELS`` / ``NCCL_MAX_NCHANNELS`` are one
number for the whole communicator, and ``allreduce:8`` there parses as 0: one channel). So
``env_text`` writes the lists of what the table uses per collective, and says, per collective,
where NCCL's own model left to choose among them picks otherwise than the table and how much
that costs in synth's model.

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import load_calibration
>>> from synth.tuner.tune import tune
>>> text = env_text(tune(resolve_topology("dgx1"), ["allreduce", "broadcast"], [None], load_calibration("default")))
>>> print("\\n".join(line for line in text.splitlines() if line.startswith("export")))
export NCCL_ALGO="allreduce:Ring;broadcast:Ring"
export NCCL_PROTO="allreduce:LL,LL128,Simple;broadcast:LL,LL128,Simple"
"""

from __future__ import annotations

from synth.core.collectives import KINDS
from synth.tuner.choice import GRID
from synth.tuner.tune import Tuned

ALGO_NAMES = {"ring": "Ring", "tree": "Tree", "pat": "PAT", "collnet_direct": "CollNetDirect",
              "collnet_chain": "CollNetChain", "nvls": "NVLS", "nvls_tree": "NVLSTree"}
PROTO_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
NEEDS = "NCCL >= 2.24.3 (older NCCL reads a per-collective list as one unknown name and disables every algorithm)"


def env_text(tuned: list[Tuned]) -> str:
    """``export`` lines for the collectives of ``tuned`` (one communicator: the first), then what
    they cannot express, as comments."""
    first = tuned[0].topology
    tables = [t for t in tuned if t.topology == first]
    algos, protos, notes = [], [], []
    for t in tables:
        name = KINDS[t.collective].spelled_for("nccl-env")
        used_algos = _ordered({r.pick.algorithm for r in t.ranges}, list(ALGO_NAMES))
        used_protos = _ordered({r.pick.protocol for r in t.ranges}, list(PROTO_NAMES))
        algos.append(f"{name}:{','.join(ALGO_NAMES[a] for a in used_algos)}")
        protos.append(f"{name}:{','.join(PROTO_NAMES[p] for p in used_protos)}")
        notes.append(_left_to_nccl(t, set(used_algos), set(used_protos)))
    channels = sorted({r.pick.channels for t in tables for r in t.ranges if r.pick.channels})
    out = [f"# synth tune {first.name}: NCCL_ALGO / NCCL_PROTO per collective, for {NEEDS}",
           f'export NCCL_ALGO="{";".join(algos)}"',
           f'export NCCL_PROTO="{";".join(protos)}"',
           "# What these cannot say (the tuner config, synth tune -o nccl_tuner.conf, says it):",
           "# - where one algorithm or protocol takes over from another: NCCL's own model chooses among those "
           "left, at every size;"]
    out += [f"#   {note}" for note in notes]
    out.append(f"# - channel counts per call (the table uses {_span(channels)}): NCCL_MIN_NCHANNELS / "
               "NCCL_MAX_NCHANNELS set one count for the whole communicator, every collective and size")
    if len(tables) < len(tuned):
        out.append("# - other communicators: environment settings apply to every communicator alike")
    return "\n".join(out) + "\n"


def _left_to_nccl(t: Tuned, algos: set[str], protos: set[str]) -> str:
    """Where NCCL's own model, restricted to ``algos`` x ``protos``, picks otherwise than the table."""
    options = t.options
    worst, where, differs = 1.0, None, 0
    for size in GRID:
        own = options.own_pick(size, algos, protos)
        tuned = options.fastest(size)
        if own is None or tuned is None:
            return f"{t.collective}: NCCL's model has no pick to compare with"
        if own.setting[:2] != tuned.setting[:2]:
            differs += 1
            if own.time_us / tuned.time_us > worst:
                worst, where = own.time_us / tuned.time_us, size
    if not differs:
        return f"{t.collective}: NCCL's own model picks as the table does at every size of 1K..4G"
    from synth.cost import format_size

    return (f"{t.collective}: NCCL's own model picks otherwise at {differs} of {len(GRID)} sizes of 1K..4G, "
            f"up to {worst:.2f}x slower (at {format_size(where)})" if where else
            f"{t.collective}: NCCL's own model picks otherwise at {differs} sizes, no slower in synth's model")


def _ordered(used: set[str], order: list[str]) -> list[str]:
    return [name for name in order if name in used]


def _span(channels: list[int]) -> str:
    if not channels:
        return "none"
    return str(channels[0]) if len(channels) == 1 else f"{channels[0]}..{channels[-1]}"
