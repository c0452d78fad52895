"""``synth report TOPO moe_dispatch:FILE`` (or ``moe_combine``): one routing, four plans.

A routing fixes its size, so this report has no size sweep: the router, the planner, DeepEP's
scheme and direct (NCCL's all_to_all_v) at the routing's size, in the contract step model
("ideal", no calibration: the runtime model's per-thread-block terms are not fitted for MoE
kernels), each verified, against the bound, with the speedups of the router and the planner over
direct and DeepEP. The folder gets ``report.md``, ``report.json`` and every schedule under
``schedules/`` (gzip-compressed: a 64-GPU dispatch is millions of sends).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from synth.bounds.lower_bounds import lower_bounds
from synth.bounds.solver import MilpOptions
from synth.core.collectives import make_collective
from synth.core.errors import InputError
from synth.core.io import dumps, save_schedule, write_text_atomic
from synth.core.library import resolve_topology
from synth.moe.router import DEFAULT_GAP
from synth.moe.synthesize import METHODS, moe_schedule
from synth.verify import checked

Say = Callable[[str], None]


def moe_report(topology: str, collective: str, out: str | Path, time_limit: float = 120.0,
               say: Say | None = None) -> dict:
    """Plan, verify, cost and write the report folder; returns report.json's document."""
    say = say or (lambda line: None)
    topo = resolve_topology(topology)
    coll = make_collective(collective, topo.ranks)
    size = coll.size_bytes
    bound = lower_bounds(topo, coll)
    milp = MilpOptions(time_limit=time_limit, gap=DEFAULT_GAP)
    rows, schedules = [], {}
    for method in METHODS:
        result = moe_schedule(topo, collective, method, milp)
        schedule = checked(result.schedule, f"the moe {method}")
        say(f"{topo.name} {coll.name}: {method}: {len(schedule.steps)} steps, {schedule.send_count} sends, "
            f"{result.details['time_us']:.1f} us, planned in {result.seconds:.2f} s")
        schedules[method] = schedule
        rows.append({"method": method, "steps": len(schedule.steps), "sends": schedule.send_count,
                     "depth": result.details["depth"], "time_us": result.details["time_us"],
                     "percent_of_bound": 100.0 * bound.time_us(size) / result.details["time_us"],
                     "plan_seconds": round(result.seconds, 4)})
    times = {row["method"]: row["time_us"] for row in rows}
    doc = {"topology": topo.name, "collective": coll.name, "routing": collective.partition(":")[2],
           "size_bytes": size, "tokens": coll.chunks, "token_bytes": coll.chunk_bytes,
           "model": "contract step model (ideal, no calibration)",
           "bound_us": bound.time_us(size), "binding": bound.binding, "methods": rows,
           "speedups": {f"{ours} over {theirs}": times[theirs] / times[ours]
                        for ours in ("router", "planner") for theirs in ("direct", "deepep")}}
    _write(Path(out), topo.name, coll.name, doc, schedules)
    return doc


def _write(folder: Path, topology: str, kind: str, doc: dict, schedules: dict) -> None:
    try:
        (folder / "schedules").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{folder}: cannot create folder: {exc.strerror or exc}") from None
    for method, schedule in schedules.items():
        save_schedule(folder / "schedules" / f"{kind}.{topology}.{method}.schedule.json.gz", schedule)
    write_text_atomic(folder / "report.json", dumps(doc))
    write_text_atomic(folder / "report.md", markdown(doc))


def markdown(doc: dict) -> str:
    lines = [f"# {doc['collective']} on {doc['topology']}", "",
             f"Routing `{doc['routing']}`: {doc['tokens']} tokens of {doc['token_bytes']} bytes (S = "
             f"{doc['size_bytes']} bytes). {doc['model'].capitalize()}; the bound is {doc['bound_us']:.1f} us "
             f"({doc['binding']}).", "",
             "| method | steps | sends | time us | % of bound | planned in s |", "|---|---|---|---|---|---|"]
    for row in doc["methods"]:
        lines.append(f"| {row['method']} | {row['steps']} | {row['sends']} | {row['time_us']:.1f} | "
                     f"{row['percent_of_bound']:.1f}% | {row['plan_seconds']:.2f} |")
    lines += ["", "Speedups: " + "; ".join(f"{name} {value:.2f}x" for name, value in doc["speedups"].items()), ""]
    return "\n".join(lines)


def summary_lines(doc: dict) -> list[str]:
    """What ``synth report`` prints for a routing: one line per method, then the verdict."""
    lines = [f"{row['method']:>8}: {row['time_us']:10.1f} us  {row['percent_of_bound']:5.1f}% of the bound"
             for row in doc["methods"]]
    speed = doc["speedups"]
    lines.append(f"router: {speed['router over direct']:.2f}x direct (NCCL's all_to_all_v), "
                 f"{speed['router over deepep']:.2f}x DeepEP's scheme ({doc['model']})")
    return lines
