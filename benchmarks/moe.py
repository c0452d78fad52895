"""MoE dispatch and combine (issue 28): direct (NCCL's all_to_all_v), DeepEP's scheme, the fast
planner and the MILP router against the bound, per machine, popularity, imbalance and tokens.

Run: python benchmarks/moe.py [--quick] [--json FILE] [--markdown FILE]
Routings are synthetic (``synth routing make``: 256 experts, top-8, 7168 x bf16 = 14336 bytes per
token, seeded). Every figure is the contract step model ("ideal", default constants, no
calibration) at the routing's own size; combine is costed on its own (reversed) plan. Every plan,
dispatch and combine, is verified before it is counted (the array replay; with switch entries, the
schedule verifier's bit-set replay). Planner seconds are
the median of ``--repeat`` runs in this process (routing to pipelined plan, arrays only);
router seconds are one run (MILP with HiGHS at its default gap, then the equitable split).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

MACHINES = ("h100x4", "h100x8")
POPULARITY = ("uniform", "zipf:1.2")
TOKENS = (128, 512, 2048, 4096, 8192)
IMBALANCE = (1.0, 2.0)
EXPERTS, TOPK, TOKEN_BYTES = 256, 8, 14336
QUICK = {"machines": ("h100x4",), "tokens": (512,), "imbalance": (1.0, 2.0)}


def measure(machine: str, popularity: str, tokens: int, imbalance: float, repeat: int, seed: int) -> dict:
    """One routing: every method's dispatch and combine time, the bound, the planners' seconds."""
    from synth.bounds.lower_bounds import lower_bounds
    from synth.bounds.solver import MilpOptions
    from synth.core.library import resolve_topology
    from synth.moe.costing import LinkTable
    from synth.moe.generate import make_routing
    from synth.moe.plan import plan_valid, reversed_hops
    from synth.moe.router import DEFAULT_GAP
    from synth.moe.synthesize import METHODS, plan_hops

    topo = resolve_topology(machine)
    routing = make_routing(topo.ranks, EXPERTS, TOPK, tokens, TOKEN_BYTES, popularity, seed=seed, imbalance=imbalance)
    table = LinkTable.of(topo)
    row = {"machine": machine, "popularity": popularity, "imbalance": imbalance, "tokens_per_gpu": tokens,
           "size_bytes": int(routing.tokens_per_rank.max()) * TOKEN_BYTES}
    milp = MilpOptions(time_limit=300, gap=DEFAULT_GAP)
    for kind in ("moe_dispatch", "moe_combine"):
        collective = routing.collective(kind)
        row[f"{kind}.bound_us"] = lower_bounds(topo, collective).time_us(collective.size_bytes)
    for method in METHODS:
        hops, seconds, details = plan_hops(topo, routing, method, milp, table)
        row[f"{method}.seconds"] = seconds
        row[f"{method}.depth"] = details["depth"]
        for kind, plan in (("moe_dispatch", hops), ("moe_combine", reversed_hops(hops))):
            if not plan_valid(topo, routing.collective(kind), plan):
                raise SystemExit(f"{machine} {popularity} x{imbalance} {tokens}: {method} {kind} does not verify")
            row[f"{kind}.{method}_us"] = table.time_us(plan, TOKEN_BYTES)
    row["planner.seconds"] = statistics.median(
        [plan_hops(topo, routing, "planner", None, table)[1] for _ in range(repeat)])
    return row


def print_row(row: dict) -> None:
    for kind in ("moe_dispatch", "moe_combine"):
        bound = row[f"{kind}.bound_us"]
        times = {m: row[f"{kind}.{m}_us"] for m in ("direct", "deepep", "planner", "router")}
        cells = "  ".join(f"{m} {t:9.1f} ({100 * bound / t:5.1f}%)" for m, t in times.items())
        print(f"{row['machine']:>7} {row['popularity']:>8} x{row['imbalance']:<3g} {row['tokens_per_gpu']:>5} "
              f"{kind[4:]:>8}  bound {bound:9.1f}  {cells}  router/direct {times['direct'] / times['router']:4.2f}x "
              f"router/deepep {times['deepep'] / times['router']:4.2f}x  planner {row['planner.seconds']:.2f} s "
              f"router {row['router.seconds']:.1f} s", flush=True)


def markdown(rows: list[dict]) -> str:
    """The table for README/docs: dispatch (combine in brackets where it differs)."""
    lines = ["| machine | popularity | imbalance | tokens/GPU | bound us | direct | deepep | planner | router | "
             "router vs direct | router vs deepep | planner s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        k = "moe_dispatch"
        bound = row[f"{k}.bound_us"]
        cell = {m: f"{row[f'{k}.{m}_us']:.0f} ({100 * bound / row[f'{k}.{m}_us']:.0f}%)"
                for m in ("direct", "deepep", "planner", "router")}
        lines.append(f"| {row['machine']} | {row['popularity']} | {row['imbalance']:g} | {row['tokens_per_gpu']} | "
                     f"{bound:.0f} | {cell['direct']} | {cell['deepep']} | {cell['planner']} | {cell['router']} | "
                     f"{row[f'{k}.direct_us'] / row[f'{k}.router_us']:.2f}x | "
                     f"{row[f'{k}.deepep_us'] / row[f'{k}.router_us']:.2f}x | {row['planner.seconds']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="h100x4, 512 tokens per GPU only")
    parser.add_argument("--machines", default=",".join(MACHINES))
    parser.add_argument("--popularity", default=",".join(POPULARITY))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--imbalance", default=",".join(map(str, IMBALANCE)))
    parser.add_argument("--repeat", type=int, default=5, help="planner runs per routing (the median is shown)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", help="write every row here")
    parser.add_argument("--markdown", help="write the dispatch table here")
    args = parser.parse_args(argv)
    machines, tokens = args.machines.split(","), [int(t) for t in args.tokens.split(",")]
    imbalance = [float(f) for f in args.imbalance.split(",")]
    if args.quick:
        machines, tokens, imbalance = QUICK["machines"], QUICK["tokens"], QUICK["imbalance"]
    print(" ".join(__doc__.split("\n\n")[1].splitlines()[1:]), file=sys.stderr)
    rows, started = [], time.perf_counter()
    for machine in machines:
        for popularity in args.popularity.split(","):
            for factor in imbalance:
                for count in tokens:
                    rows.append(measure(machine, popularity, count, factor, args.repeat, args.seed))
                    print_row(rows[-1])
    print(f"{len(rows)} routings in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as handle:
            handle.write(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
