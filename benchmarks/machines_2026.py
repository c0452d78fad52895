"""Synthesis on the 2026 machines (issue 42, item 4): every new library machine x allreduce,
allgather, reduce-scatter and alltoall at one size, by ``synth solve``'s automatic backend under
the default calibration (each machine's own generation terms, docs/cost-model.md), verified,
against what NCCL (or RCCL) takes there and against the runtime bound.

- ``ours``: the synthesized schedule at its fastest protocol under the calibration's terms.
- ``NCCL``: the lower of NCCL's fastest schedule under the same terms (``synth baseline --algo
  nccl``) and the runtime model's prediction of what NCCL runs there (fitted to the shared
  nccl-tests runs, one process per GPU): the strongest thing a user of the machine runs today.
- ``bound``: the runtime bound (the topology at the rates the runtime reaches, plus one call's
  latency); ``% bound`` is it over ours.

Run: python benchmarks/machines_2026.py [--size 1G] [--machines h200,b200,...] [--collectives ...]
      [--markdown FILE]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

MACHINES = ("h200", "b200", "b300", "gb200nvl72", "gb300nvl72", "mi325x", "mi355x")
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "alltoall")


def measure(machine: str, collective: str, size: int) -> dict:
    """One machine and collective: ours, NCCL's, the bound (us) and the solve's seconds."""
    from synth import synthesizers
    from synth.baselines import BaselineNotApplicable
    from synth.baselines.nccl import build as nccl_schedule
    from synth.bounds.runtime import runtime_bounds
    from synth.core.library import resolve_topology
    from synth.cost import best_protocol
    from synth.measure.calibration import load_calibration
    from synth.measure.runtime import Launch, describe, nccl_time

    topology = resolve_topology(machine)
    calibration = load_calibration("default").on(topology.arch)
    terms = calibration.terms("default")
    started = time.perf_counter()
    result = synthesizers.synthesize(synthesizers.Problem(topology, collective, size=size),
                                     synthesizers.Options(terms=terms, time_limit=300))
    seconds = time.perf_counter() - started
    protocol, ours = best_protocol(result.schedule, size, terms)
    modelled = nccl_time(describe(topology), collective, size, calibration, Launch("processes"))
    try:
        scheduled = nccl_schedule(topology, collective, None, None, size, terms).meta["time_us"]
    except BaselineNotApplicable:
        scheduled = float("inf")
    bound = runtime_bounds(topology, result.schedule.collective, terms).time_us(size)
    return {"machine": machine, "arch": topology.arch, "collective": collective, "size": size,
            "backend": result.backend, "ours_us": ours, "protocol": protocol,
            "nccl_us": min(modelled.time_us, scheduled),
            "nccl_pick": f"{modelled.algorithm}/{modelled.protocol}" if modelled.time_us <= scheduled else "schedule",
            "bound_us": bound, "seconds": seconds}


def line(row: dict) -> str:
    return (f"| {row['machine']} | {row['arch']} | {row['collective']} | {row['backend']} | {row['ours_us']:.1f} "
            f"({row['protocol']}) | {row['nccl_us']:.1f} ({row['nccl_pick']}) | {row['nccl_us'] / row['ours_us']:.2f}x "
            f"| {100 * row['bound_us'] / row['ours_us']:.1f}% | {row['seconds']:.1f} |")


HEADER = ("| machine | arch | collective | backend | ours us | NCCL us | vs NCCL | % bound | solve s |\n"
          "|---|---|---|---|---|---|---|---|---|")


def main(argv: list[str] | None = None) -> int:
    from synth.cost import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1G")
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--collectives", default=",".join(COLLECTIVES))
    parser.add_argument("--markdown", help="write the table here too")
    args = parser.parse_args(argv)
    size = parse_size(args.size)
    lines = [HEADER]
    print(HEADER, flush=True)
    for machine in args.machines.split(","):
        for collective in args.collectives.split(","):
            lines.append(line(measure(machine, collective, size)))
            print(lines[-1], flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    print(f"default calibration, {args.size}; peak memory {peak:.2f} GB", file=sys.stderr)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
