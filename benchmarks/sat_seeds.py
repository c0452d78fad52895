"""One SMT budget, every SAT engine and seed: how much of an engine's time is the seed's luck.

Run: python benchmarks/sat_seeds.py [--topology mi250] [--collective allgather] [--steps 12]
     [--rounds 17] [--chunks 7] [--engines z3,cadical,kissat] [--seeds 4] [--seconds 25]
     [--exact] [--jobs 2] [--portfolio N]

Each (engine, seed) checks the whole budget (at most ``--rounds`` rounds in all, no split) of
the restricted symmetric encoding (``--exact``: the exact one) in a fresh process, with a time
limit, as the walk's first try at a budget does. A row is the verdict and the seconds inside
the engine (the encoding's build is timed apart). Every SAT answer's schedule goes through the
verifier. The spread across seeds of one engine is what a portfolio (``synth pareto --jobs``)
draws on; the spread across engines is what ``--sat auto`` chooses from. ``--portfolio N``
adds a last row: ``--sat auto`` with N members racing (run alone; its "seed" column names the
members).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time


def _check(topo_name, coll_name, steps, rounds, chunks, exact, engine, seed, seconds, out, portfolio=1):
    from synth.core.collectives import make_collective
    from synth.core.library import resolve_topology
    from synth.core.symmetry import search_symmetries
    from synth.smt.encoding import SmtInstance, SmtOptions
    from synth.verify import verify

    topo = resolve_topology(topo_name)
    coll = make_collective(coll_name, topo.ranks, None, chunks)
    began = time.perf_counter()
    symmetries = () if exact else tuple(search_symmetries(topo, coll))
    options = SmtOptions(sat=engine, random_seed=seed, portfolio=portfolio)
    inst = SmtInstance(topo, coll, steps, rounds, options, symmetries)
    built = time.perf_counter() - began
    result = inst.solve(rounds, seconds)
    verdict = result.status.value
    if portfolio > 1:
        verdict += " (" + ", ".join(f"{m.name} {m.seed}" for m in inst.engine.members) + ")"
    if result.schedule is not None:
        problems = verify(result.schedule)
        verdict += ", verified" if not problems else f", VERIFIER: {problems[0]}"
    out.put((verdict, result.seconds, built, inst.formula.num_vars, inst.formula.num_clauses))


def _row(args, engine, seed, ctx, portfolio=1):
    out = ctx.Queue()
    proc = ctx.Process(target=_check, args=(args.topology, args.collective, args.steps, args.rounds, args.chunks,
                                            args.exact, engine, seed, args.seconds, out, portfolio))
    proc.start()
    return proc, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="mi250")
    parser.add_argument("--collective", default="allgather")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=17)
    parser.add_argument("--chunks", type=int, default=7)
    parser.add_argument("--engines", default="z3,cadical,kissat")
    parser.add_argument("--seeds", type=int, default=4, help="seeds 0..N-1 per engine")
    parser.add_argument("--seconds", type=float, default=25.0, help="time limit of one check")
    parser.add_argument("--exact", action="store_true", help="the exact encoding, not the restricted one")
    parser.add_argument("--jobs", type=int, default=1, help="checks run at once (each in its own process)")
    parser.add_argument("--portfolio", type=int, default=0, metavar="N", help="a last row: auto, N members racing")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    runs = [(engine, seed, 1) for engine in args.engines.split(",") for seed in range(args.seeds)]
    encoding = "exact" if args.exact else "restricted"
    print(f"{args.topology} {args.collective} (S={args.steps}, R={args.rounds}, C={args.chunks}), {encoding} "
          f"encoding, whole budget, {args.seconds:g} s a check, {args.jobs} at once")
    print("| engine | seed | verdict | engine s | build s | variables | clauses |")
    print("|---|---|---|---|---|---|---|")
    width = max(1, args.jobs)
    batches = [runs[start:start + width] for start in range(0, len(runs), width)]
    if args.portfolio > 1:
        batches.append([("auto", 0, args.portfolio)])
    for batch in batches:
        started = [(engine, seed, portfolio, *_row(args, engine, seed, ctx, portfolio))
                   for engine, seed, portfolio in batch]
        for engine, seed, portfolio, proc, out in started:
            verdict, spent, built, num_vars, num_clauses = out.get()
            proc.join()
            name = f"auto, {portfolio} racing" if portfolio > 1 else engine
            print(f"| {name} | {seed} | {verdict} | {spent:.1f} | {built:.1f} | {num_vars} | {num_clauses} |",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
