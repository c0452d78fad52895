"""What a run let NCCL do: its NCCL_ALGO / NCCL_PROTO / NCCL_NVLS_ENABLE / NCCL_COLLNET_ENABLE
settings and the algorithm NCCL printed per call, read from the text around an nccl-tests table.

The reader (``synth.measure.logs``) hands each line here; these functions only recognise what a
line states:

- ``statements(text)``: ``NAME=VALUE`` for the four variables wherever written (a command's
  environment, ``-x NAME=VALUE``, ``export``, a header's prose; quotes removed, a trailing ``.``,
  ``,`` or ``)`` dropped), and ``NAME unset`` / ``NAME not set`` / ``NAME is unset`` (NCCL's
  default, stated explicitly), as (name, value) with value None for unset.
- ``info_setting(text)``: NCCL's own ``NCCL INFO NAME set by environment to VALUE`` line.
- ``chosen_call(text)``: NCCL's per-call ``NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS
  proto SIMPLE channel{Lo..Hi}={0..15}`` line (NCCL_DEBUG_SUBSYS=TUNING or COLL).

``allowed(settings, collective)`` turns the settings into what the model may consider
(``Allowed``): NCCL_ALGO's grammar (``Ring,Tree``; ``^NVLS`` excludes; ``allreduce:tree;
allgather:ring`` per collective), NCCL_PROTO likewise, NVLS off when NCCL_NVLS_ENABLE is 0,
CollNet on when NCCL_COLLNET_ENABLE is 1 and off when 0 (reference/in-network.md section 6).

>>> statements("# Config = NCCL_ALGO=RING NCCL_NVLS_ENABLE=0 (common.sh).")
[('NCCL_ALGO', 'RING'), ('NCCL_NVLS_ENABLE', '0')]
>>> statements("NCCL_ALGO unset, NCCL_NVLS_ENABLE=1")
[('NCCL_ALGO', None), ('NCCL_NVLS_ENABLE', '1')]
>>> a = allowed({"NCCL_ALGO": "^NVLS,NVLSTree", "NCCL_NVLS_ENABLE": "1"}, "allreduce")
>>> sorted(a.excluded), a.nvls
(['nvls', 'nvls_tree'], True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping

from synth.core.errors import InputError

VARIABLES = ("NCCL_ALGO", "NCCL_PROTO", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_SYM_NOWIN_ENABLE",
             "NCCL_CTA_POLICY")
ALGORITHMS = ("ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain", "pat", "p2p")
PROTOCOLS = ("ll", "ll128", "simple")

# NCCL's spellings (env.rst: NCCL_ALGO; ncclAlgoStr in the INFO lines), upper-cased, without _ and -.
_ALGO_NAMES = {"RING": ("ring",), "TREE": ("tree",), "NVLS": ("nvls",), "NVLSTREE": ("nvls_tree",),
               "COLLNETDIRECT": ("collnet_direct",), "COLLNETCHAIN": ("collnet_chain",),
               "COLLNET": ("collnet_direct", "collnet_chain"), "PAT": ("pat",)}
_PROTO_NAMES = {"LL": "ll", "LL128": "ll128", "SIMPLE": "simple"}
# nccl-tests / NCCL names of collectives (NCCL_ALGO's "allreduce:..." prefixes; INFO lines)
_COLLECTIVES = {"ALLREDUCE": "allreduce", "ALLGATHER": "allgather", "REDUCESCATTER": "reduce_scatter",
                "BROADCAST": "broadcast", "REDUCE": "reduce", "ALLTOALL": "alltoall"}

_NAME = r"(?<![A-Za-z0-9_])(" + "|".join(VARIABLES) + r")(?![A-Za-z0-9_])"
_ASSIGNMENT = re.compile(_NAME + r"\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s;]+?(?=,[A-Za-z_][A-Za-z0-9_]*=|[\s;]|$))")
_UNSET = re.compile(_NAME + r"\s+(?:is\s+|was\s+)?(?:unset|not\s+set)\b", re.I)
_INFO_SETTING = re.compile(r"\bNCCL INFO\s+(" + "|".join(VARIABLES) + r")\s+set by environment to\s+(\S+)")
_CALL = re.compile(r"\bNCCL INFO\s+([A-Za-z]+)\s*:\s*(?:opCount\s+\S+\s+)?([0-9]{1,19})\s+Bytes\s*->\s*"
                   r"Algo\s+([A-Za-z_]+)\s+proto\s+([A-Za-z0-9_]+)")


@dataclass(frozen=True)
class Call:
    """One call as NCCL logged it: collective (synth's name), bytes, algorithm and protocol
    (synth's names; None when NCCL's name is not one synth knows)."""

    collective: str
    size_bytes: int
    algorithm: str | None
    protocol: str | None


@dataclass(frozen=True)
class Allowed:
    """What a run let NCCL consider for one collective. ``algorithms``: those NCCL_ALGO named
    (None: all); ``excluded``: those it excluded with ``^``; ``protocols``: NCCL_PROTO's (None:
    all); ``nvls``: False when NCCL_NVLS_ENABLE=0, True when set otherwise, None unset (NCCL's
    default: on where the hardware has it); ``collnet``: True when NCCL_COLLNET_ENABLE=1, False
    when 0, None unset (here: on where the topology has a SHARP switch)."""

    algorithms: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()
    protocols: frozenset[str] | None = None
    nvls: bool | None = None
    collnet: bool | None = None

    def permits(self, algorithm: str) -> bool:
        """Whether the settings leave ``algorithm`` to NCCL (before the hardware has its say);
        point-to-point (alltoall's sends) is no collective algorithm: NCCL_ALGO does not touch it."""
        if algorithm == "p2p":
            return True
        if algorithm in self.excluded or (self.algorithms is not None and algorithm not in self.algorithms):
            return False
        if self.nvls is False and algorithm in ("nvls", "nvls_tree"):
            return False
        return not (self.collnet is False and algorithm in ("collnet_direct", "collnet_chain"))

    def permits_protocol(self, protocol: str) -> bool:
        return self.protocols is None or protocol in self.protocols

    def describe(self) -> str:
        """The settings in words, for error lines."""
        parts = []
        if self.algorithms is not None:
            parts.append("NCCL_ALGO allows " + ", ".join(sorted(self.algorithms)))
        if self.excluded:
            parts.append("NCCL_ALGO excludes " + ", ".join(sorted(self.excluded)))
        if self.nvls is False:
            parts.append("NVLS disabled")
        if self.collnet is False:
            parts.append("CollNet disabled")
        return "; ".join(parts) or "NCCL's defaults"


def statements(text: str) -> list[tuple[str, str | None]]:
    """(name, value) for every assignment of the four variables in ``text``, and (name, None) for
    every one stated unset, in the order written."""
    found = [(m.start(), m.group(1), _unquoted(m.group(2))) for m in _ASSIGNMENT.finditer(text)]
    found += [(m.start(), m.group(1), None) for m in _UNSET.finditer(text)]
    return [(name, value) for _, name, value in sorted(found) if value != ""]


_CONTRAST = re.compile(r"\b(?:without|versus|vs\.?|unlike|instead\s+of|compared\s+(?:to|with)|companion|pair)\b",
                       re.I)


def prose_statements(text: str) -> list[tuple[str, str | None]]:
    """``statements`` of a header's prose, less those it names as the alternative to this run:
    an assignment after a contrast word (``without``, ``vs``, ``unlike``, ``instead of``,
    ``compared to``, ``companion``, ``pair``) in the same sentence describes another run.

    >>> prose_statements("# Notes: bench_fair.sh only ran -R 2, with and without NCCL_NVLS_ENABLE=0")
    []
    >>> prose_statements("# NCCL_ALGO=Ring (the pair: NCCL_ALGO=NVLS)")
    [('NCCL_ALGO', 'Ring')]
    """
    return [pair for part in prose_parts(text) for pair in statements(part)]


def prose_parts(text: str) -> list[str]:
    """The parts of a header's prose that describe this run: each sentence (or parenthesis) up to
    its first contrast word (``prose_statements``)."""
    parts = []
    for sentence in re.split(r"(?<=[.;])\s+|\(", text):
        contrast = _CONTRAST.search(sentence)
        parts.append(sentence[:contrast.start()] if contrast else sentence)
    return parts


def info_setting(text: str) -> tuple[str, str] | None:
    """(name, value) of NCCL's ``NAME set by environment to VALUE`` line, else None."""
    match = _INFO_SETTING.search(text)
    return (match.group(1), _unquoted(match.group(2))) if match else None


def chosen_call(text: str) -> Call | None:
    """The call NCCL's per-call INFO line describes, else None."""
    match = _CALL.search(text)
    if match is None:
        return None
    collective = _COLLECTIVES.get(match.group(1).upper())
    if collective is None:
        return None
    algos = _ALGO_NAMES.get(_key(match.group(3)), ())
    return Call(collective, int(match.group(2)), algos[0] if len(algos) == 1 else None,
                _PROTO_NAMES.get(match.group(4).upper()))


def allowed(settings: Mapping[str, str | None], collective: str) -> Allowed:
    """What ``settings`` (variable -> value, None: unset) leave NCCL for ``collective``; an
    NCCL_ALGO or NCCL_PROTO value naming nothing synth knows is one InputError line."""
    algos, excluded = _listed(settings.get("NCCL_ALGO"), collective, _algorithm_names, "NCCL_ALGO")
    protos, dropped = _listed(settings.get("NCCL_PROTO"), collective, _protocol_names, "NCCL_PROTO")
    if protos is not None or dropped:
        protos = frozenset(protos if protos is not None else PROTOCOLS) - dropped
    return Allowed(algos, excluded, protos, _switch(settings.get("NCCL_NVLS_ENABLE")),
                   _switch(settings.get("NCCL_COLLNET_ENABLE")))


def _switch(value: str | None) -> bool | None:
    """An NCCL enable variable: 0 off, any other integer on, None (or not an integer) unset."""
    if value is None or re.fullmatch(r"-?[0-9]+", value.strip()) is None:
        return None
    return int(value) != 0


def _listed(value: str | None, collective: str, names, variable: str) -> tuple[frozenset | None, frozenset]:
    """(named, excluded) of an NCCL_ALGO / NCCL_PROTO value for ``collective`` (see the module)."""
    if value is None:
        return None, frozenset()
    text = _for_collective(value, collective)
    if text is None:
        return None, frozenset()
    exclude = text.startswith("^")
    items = frozenset(n for token in text.lstrip("^").split(",") if token.strip()
                      for n in names(token.strip(), variable))
    return (None, items) if exclude else (items, frozenset())


def _for_collective(value: str, collective: str) -> str | None:
    """The part of ``value`` for ``collective``: all of it without ``coll:`` prefixes; else the
    matching ``coll:list`` entry (None: this collective is left to the defaults)."""
    if ":" not in value:
        return value
    for entry in value.split(";"):
        name, _, items = entry.partition(":")
        if _COLLECTIVES.get(_key(name)) == collective:
            return items
    return None


def _algorithm_names(token: str, variable: str) -> tuple[str, ...]:
    names = _ALGO_NAMES.get(_key(token))
    if names is None:
        raise InputError(f"{variable}={token!r}: not an algorithm NCCL knows "
                         f"(Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT)")
    return names


def _protocol_names(token: str, variable: str) -> tuple[str, ...]:
    name = _PROTO_NAMES.get(token.upper())
    if name is None:
        raise InputError(f"{variable}={token!r}: not a protocol NCCL knows (LL, LL128, Simple)")
    return (name,)


def _key(name: str) -> str:
    return re.sub(r"[_\-\s]", "", name).upper()


def _unquoted(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1].strip()
    return value.rstrip(".,)]").strip()
