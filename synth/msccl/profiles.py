"""What each MSCCL runtime accepts (shared/reference/msccl-format.md, sections 3, 7, 9, 11).

>>> PROFILES["rccl"].max_threadblocks, PROFILES["executor"].coll_names["reduce_scatter"]
(64, 'reducescatter')
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from synth.core.collectives import KINDS
from synth.msccl.runtimes import RUNTIMES  # noqa: F401 (the profiles' names, in PROFILES order)
from synth.program.ir import MAX_FUSED_REDUCES  # noqa: F401 (a runtime limit the IR's fusion keeps)


@dataclass(frozen=True)
class Profile:
    """One runtime's load-time rules and compile-time limits."""

    name: str
    title: str
    coll_names: Mapping[str, str]  # synth collective name -> the runtime's spelling
    max_steps: int  # steps per thread block (the `s` bound)
    max_threadblocks: int  # per rank
    max_channels: int  # MAXCHANNELS
    requires: tuple[str, ...]  # <algo> attributes the runtime refuses a file without
    max_bytes_exclusive: bool  # legacy: nBytes < maxBytes; executor/rccl: nBytes <= maxBytes
    max_bytes_zero_means: str  # "never" (legacy) or "unbounded"
    checks_chunk_counts: bool  # legacy rejects i/o chunks inconsistent with nchunksperloop


MAX_DEP_TB = 127  # depid is stored in 8 bits (signed)
MAX_COUNT = 71  # cnt < 72
MAX_PEERS_PER_CHANNEL = 32
MAX_ELEMENTS_PER_RANK = 4096
MAX_ATTRIBUTES = 16
MAX_VALUE_CHARS = 255
MAX_OFFSET = 32767  # int16

_COMMON = ("allreduce", "allgather", "reduce", "broadcast", "alltoall", "reduce_scatter")


def _coll_names(runtime: str, collectives: tuple[str, ...], others: tuple[str, ...]) -> Mapping[str, str]:
    """synth name -> ``runtime``'s spelling of each collective it runs (the spellings are facts of
    the collective kinds, synth.core.collectives), and the runtime's own names (``others``)."""
    return MappingProxyType({**{name: KINDS[name].spelled_for(runtime) for name in collectives},
                             **{name: name for name in others}})


# the executor and RCCL share one parser: the same names and required attributes
_EXECUTOR_NAMES = _coll_names("executor", (*_COMMON, "gather", "scatter", "alltoallv"), ("send", "recv"))
_EXECUTOR_REQUIRES = ("proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
                      "minBytes", "maxBytes")

PROFILES: Mapping[str, Profile] = MappingProxyType({
    "legacy": Profile(
        "legacy", "microsoft/msccl (NCCL 2.12 fork)",
        _coll_names("legacy", _COMMON, ("custom",)),
        max_steps=256, max_threadblocks=216, max_channels=32,
        requires=("name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace"),
        max_bytes_exclusive=True, max_bytes_zero_means="never", checks_chunk_counts=True),
    "executor": Profile(
        "executor", "Azure/msccl-executor-nccl",
        _EXECUTOR_NAMES,
        max_steps=64, max_threadblocks=1024, max_channels=32,
        requires=_EXECUTOR_REQUIRES,
        max_bytes_exclusive=False, max_bytes_zero_means="unbounded", checks_chunk_counts=False),
    "rccl": Profile(
        "rccl", "ROCm/rccl",
        _EXECUTOR_NAMES,
        max_steps=64, max_threadblocks=64, max_channels=128,
        requires=_EXECUTOR_REQUIRES,
        max_bytes_exclusive=False, max_bytes_zero_means="unbounded", checks_chunk_counts=False),
})


def synth_collective(profile: Profile, spelling: str) -> str | None:
    """The synth name of a runtime's collective spelling, or None when the runtime does not know it."""
    for name, spelled in profile.coll_names.items():
        if spelled == spelling:
            return name
    return None
