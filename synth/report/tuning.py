"""A report's "NCCL tuned by synth" column: NCCL's fastest setting at every grid size (what
``synth tune`` writes for NCCL's example tuner plugin) against what NCCL's own tuning model picks,
both costed in synth's model (``synth.tuner.choice``). The gain is what the table buys with no
custom runtime at all.

>>> from synth.core.library import resolve_topology
>>> from synth.measure.calibration import load_calibration
>>> rows = nccl_tuning(resolve_topology("dgx1"), "allreduce", [1 << 20, 1 << 24], load_calibration("default"))
>>> [(r["algorithm"], r["protocol"], r["channels"], round(r["gain"], 2)) for r in rows]
[('ring', 'll', 32, 1.0), ('ring', 'll128', 32, 1.17)]
"""

from __future__ import annotations

from typing import Any

from synth.core.topology import Topology
from synth.cost import format_size
from synth.tuner.config import TUNED


def nccl_tuning(topology: Topology, collective: str, sizes: list[int], calibration) -> list[dict[str, Any]] | None:
    """Per grid size: NCCL's fastest setting (algorithm, protocol, channels, time) and NCCL's own
    pick (algorithm, protocol, time) with the gain (own / tuned); None for a collective NCCL does
    not tune or without a calibration (no channel counts)."""
    if calibration is None or collective not in TUNED:
        return None
    from synth.tuner.choice import NcclOptions

    options = NcclOptions(topology, collective, calibration, sizes)
    rows = []
    for size in sizes:
        tuned, own = options.fastest(size), options.own_pick(size)
        rows.append({"size": size, "algorithm": tuned.algorithm, "protocol": tuned.protocol,
                     "channels": tuned.channels, "time_us": tuned.time_us, "source": tuned.source,
                     "own": None if own is None else {"algorithm": own.algorithm, "protocol": own.protocol,
                                                      "time_us": own.time_us},
                     "gain": None if own is None else own.time_us / tuned.time_us})
    return rows


def tuning_markdown(rows: list[dict[str, Any]], topology_name: str, collective: str) -> list[str]:
    """The report.md section of ``nccl_tuning``'s rows."""
    gains = [(r["gain"], r["size"]) for r in rows if r["gain"] is not None]
    lines = ["## NCCL tuned by synth (no custom runtime)", "",
             f"`synth tune {topology_name} --collectives {collective} -o nccl_tuner.conf` writes NCCL's fastest "
             "algorithm, protocol and channel count at every size (this table, between the grid sizes too) for "
             "NCCL's example tuner plugin; stock NCCL then runs it. Beside it, what NCCL's own tuning model "
             "(its formula as synth implements it, `baselines/nccl_model.py`) picks, costed the same way: the "
             "gain is what the table alone buys.", ""]
    if gains:
        most, at = max(gains)
        mean = 1.0
        for gain, _ in gains:
            mean *= gain ** (1 / len(gains))
        lines += [f"Largest gain {most:.2f}x (at {format_size(at)}); geometric mean {mean:.2f}x over the grid.", ""]
    lines += ["| size | NCCL as tuned by synth | channels | us | NCCL's own pick | us | gain |",
              "|---|---|---|---|---|---|---|"]
    for r in rows:
        own = r["own"]
        lines.append(f"| {format_size(r['size'])} | {r['algorithm']}/{r['protocol']} | {r['channels']} | "
                     f"{r['time_us']:.2f} | {'-' if own is None else own['algorithm'] + '/' + own['protocol']} | "
                     f"{'-' if own is None else format(own['time_us'], '.2f')} | "
                     f"{'-' if r['gain'] is None else format(r['gain'], '.2f') + 'x'} |")
    return lines + [""]
