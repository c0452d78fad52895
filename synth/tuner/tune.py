"""``synth tune``: the tuner table of a machine, for each communicator and collective asked for.

``tune`` builds one ``Tuned`` per (communicator, collective): its ranges (``table.ranges``), its
config lines and how much faster NCCL runs with them than left to its own tuning model
(``gain``, on a grid of sizes). ``config_text`` writes them as one config file of the example
tuner plugin; ``synth.tuner.env`` writes them as environment settings.

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import load_calibration
>>> [t] = tune(resolve_topology("dgx1"), ["allgather"], [None], load_calibration("default"))
>>> t.lines[-1].text()
'allgather,0,18446744073709551615,ring,simple,32,1,8,-1,-1'
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from synth.core.errors import InputError
from synth.core.topology import Topology
from synth.tuner.choice import CHECKED_COLLECTIVES, GRID, NcclOptions, Pick
from synth.tuner.config import MAX_BYTES, TUNED, TunerLine, render
from synth.tuner.table import Range, ranges, table_lines

REQUIRES = "NCCL's example tuner plugin from NCCL >= 2.30.3 (older copies index the cost table wrongly)"


@dataclass(frozen=True)
class Gain:
    """How NCCL as tuned compares with NCCL's own pick over a grid: the largest ratio (own /
    tuned) and where, and the geometric mean."""

    most: float
    at: int
    mean: float


@dataclass(frozen=True)
class Tuned:
    """One collective on one communicator: the topology it was made for, its ranges and lines."""

    topology: Topology
    collective: str
    ranges: tuple[Range, ...]
    lines: tuple[TunerLine, ...]
    gain: Gain | None
    options: NcclOptions = field(compare=False, repr=False)
    calibration_label: str = "default"
    symmetric_below: int = 0  # NCCL takes its symmetric kernels below this many bytes, tuner unasked

    @property
    def communicator(self) -> str:
        nodes = max(1, self.topology.machine_count)
        return f"{nodes} node{'s' if nodes != 1 else ''} x {self.topology.ranks} ranks"

    def summary(self) -> str:
        """One line: each run of ranges with one algorithm and protocol (its channel counts and where
        it ends), and the gain over NCCL's own pick."""
        runs: list[list[Range]] = []
        for r in self.ranges:
            if runs and runs[-1][-1].pick.setting[:2] == r.pick.setting[:2]:
                runs[-1].append(r)
            else:
                runs.append([r])
        parts = []
        for run in runs:
            counts = sorted({r.pick.channels or 0 for r in run})
            channels = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
            end = "" if run[-1].high >= MAX_BYTES else f" to {_size(run[-1].high + 1)}"
            parts.append(f"{run[0].pick.algorithm}/{run[0].pick.protocol} x{channels} channels{end}")
        text = f"{self.collective} on {self.communicator}: {len(self.lines)} lines ({', '.join(parts)})"
        if self.symmetric_below:
            text += (f"; below {_size(self.symmetric_below)} NCCL runs its symmetric kernels on these registered "
                     "buffers before asking the tuner: no line there")
        if self.gain is not None:
            text += (f"; NCCL's own pick (its tuning formula) is up to {self.gain.most:.2f}x slower (at "
                     f"{_size(self.gain.at)}), {self.gain.mean:.2f}x on average over 1K..4G, both costed in synth's "
                     f"model ({self.calibration_label} calibration)")
            if self.collective not in CHECKED_COLLECTIVES:
                text += "; no measured nccl-tests run checks the model for this collective"
        return text


REG_BUFF = {None: -1, "none": 0, "local": 1, "symmetric": 1}  # the tuner's regBuff per --buffers


def tune(topology: Topology, collectives: list[str], communicators: list[tuple[int, int] | None],
         calibration, calibration_label: str = "default", buffers: str | None = None) -> list[Tuned]:
    """The table of every collective on every communicator (None: the whole topology). With
    ``buffers`` (none / local / symmetric: how the calls' buffers are registered) each line is
    for calls so registered (the tuner's ``regBuff``), and where NCCL (the calibration's version)
    takes its symmetric kernels before asking the tuner (``synth.measure.symmetric.before_tuner``)
    no line is written: the tuner could not act on it."""
    out = []
    for shape in communicators:
        part = topology if shape is None else communicator_topology(topology, *shape)
        for collective in collectives:
            options = NcclOptions(part, collective, calibration)
            found = ranges(options)
            start = _symmetric_below(part, collective, calibration, buffers)
            lines = table_lines(options, found, REG_BUFF[buffers], start)
            out.append(Tuned(part, collective, tuple(found), tuple(lines), gain(options), options,
                             calibration_label, start))
    return out


def _symmetric_below(topology: Topology, collective: str, calibration, buffers: str | None) -> int:
    """Bytes below which NCCL takes its symmetric kernels on these buffers (0: none)."""
    if buffers != "symmetric":
        return 0
    from synth.measure.calibration import Calibration
    from synth.measure.runtime import describe
    from synth.measure.symmetric import Setup, before_tuner

    version = (calibration or Calibration()).nccl_version
    return before_tuner(describe(topology), collective, Setup("symmetric"), version)


def gain(options: NcclOptions, sizes: list[int] = GRID) -> Gain | None:
    """NCCL's own pick over NCCL as tuned, on ``sizes`` (None where its model has no pick)."""
    ratios = []
    for size in sizes:
        own, tuned = options.own_pick(size), options.fastest(size)
        if own is None or tuned is None:
            return None
        ratios.append((own.time_us / tuned.time_us, size))
    most, at = max(ratios)
    mean = 1.0
    for ratio, _ in ratios:
        mean *= ratio ** (1 / len(ratios))
    return Gain(most, at, mean)


def config_text(topology: Topology, tuned: list[Tuned], calibration_label: str) -> str:
    """The config file: a header naming what it is for, then every table's lines."""
    comments = [f"synth tune {topology.name}: NCCL's fastest algorithm, protocol and channel count per size in "
                f"synth's model ({calibration_label} calibration)",
                f"for {REQUIRES}: NCCL_TUNER_PLUGIN=<path>/libnccl-tuner-example.so "
                "NCCL_TUNER_CONFIG_FILE=<path to this file>",
                "sizes are NCCL's nBytes (allgather, reducescatter: the whole buffer); a call on a communicator "
                "not listed here matches no line and gets 1 channel",
                "communicators: " + ", ".join(sorted({t.communicator for t in tuned}))]
    taken = [t for t in tuned if t.symmetric_below]
    if taken:
        comments.append("registered buffers (a symmetric window): below 64 GiB NCCL runs its symmetric kernels for "
                        + ", ".join(sorted({f"{t.collective} on {t.communicator}" for t in taken}))
                        + " before asking the tuner, so no line is written there")
    lines = [line for t in tuned for line in t.lines]
    return render(lines, comments)


def parse_collectives(text: str | None) -> list[str]:
    """``--collectives``: names of the five NCCL tunes (reduce-scatter spelled either way);
    all five by default."""
    if text is None:
        return list(TUNED)
    names = [n.strip().lower().replace("-", "_") for n in text.split(",") if n.strip()]
    names = ["reduce_scatter" if n == "reducescatter" else n for n in names]
    bad = [n for n in names if n not in TUNED]
    if bad or not names:
        raise InputError(f"--collectives {text!r}: NCCL tunes {', '.join(TUNED)} only")
    return list(dict.fromkeys(names))


def parse_communicators(text: str | None) -> list[tuple[int, int] | None]:
    """``--nodes-ranks``: ``NxR`` pairs (nodes x ranks), comma-separated; the whole topology by default."""
    if text is None:
        return [None]
    out = []
    for part in text.split(","):
        match = re.fullmatch(r"\s*(\d{1,4})\s*[xX]\s*(\d{1,6})\s*", part)
        if not match or int(match.group(1)) < 1 or int(match.group(2)) < 1:
            raise InputError(f"--nodes-ranks {text!r}: expected pairs like 1x8,2x16 (nodes x ranks)")
        out.append((int(match.group(1)), int(match.group(2))))
    return list(dict.fromkeys(out))


def communicator_topology(topology: Topology, nodes: int, ranks: int) -> Topology:
    """The first ``ranks / nodes`` GPUs of each of the first ``nodes`` machines: a communicator of
    that shape (InputError when the machine has no such)."""
    from synth.core.subset import sub_topology

    machines = topology.machines or (tuple(range(topology.ranks)),)
    if nodes > len(machines) or ranks % nodes:
        raise InputError(f"--nodes-ranks {nodes}x{ranks}: {topology.name} has {len(machines)} machine(s) of "
                         f"{', '.join(sorted({str(len(m)) for m in machines}))} GPUs; give N x R with N <= "
                         f"{len(machines)} and R a multiple of N")
    per = ranks // nodes
    if any(len(m) < per for m in machines[:nodes]):
        raise InputError(f"--nodes-ranks {nodes}x{ranks}: a machine of {topology.name} has fewer than {per} GPUs")
    if (nodes, ranks) == (len(machines), topology.ranks):
        return topology
    chosen = tuple(r for m in machines[:nodes] for r in m[:per])
    return sub_topology(topology, chosen)


def _size(size: int) -> str:
    from synth.cost import format_size

    return format_size(size)


__all__ = ["Gain", "Pick", "Tuned", "communicator_topology", "config_text", "gain", "parse_collectives",
           "parse_communicators", "tune"]
