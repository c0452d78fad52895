"""The MSCCL XML corpus on real processes: what our replay says, what ``synth run`` does, and what a
forced run does, per file (shared/corpus/msccl-xml, at most 16 ranks by default; gloo).

    python benchmarks/corpus_runtime.py [--max-ranks 16] [--timeout 10] [--sizes 1K,1M]

``synth run`` refuses a file our replay finds wrong (exit 4); ``--force`` runs it anyway and must end
with a verdict within the timeout. Files the replay calls correct run once (forcing changes nothing).
Prints a markdown table and the totals; exit 1 if a file the replay calls correct does not run
correct, or a forced run does not end within the timeout plus a grace.
"""

from __future__ import annotations

import argparse
import re
import sys
import time


def main() -> int:
    from synth.core.errors import SynthError
    from synth.cost import parse_sizes
    from synth.msccl.corpus import corpus_root
    from synth.runtime.launcher import GRACE, World
    from synth.runtime.measure import RunOptions
    from synth.runtime.runnable import load_runnable, precheck

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-ranks", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--sizes", default="1K,1M")
    args = parser.parse_args()
    root = corpus_root()
    if root is None:
        print("shared/corpus not found beside the repository (set SYNTH_CORPUS)", file=sys.stderr)
        return 2
    options = RunOptions(sizes=tuple(parse_sizes(args.sizes)), iters=1, warmup=0, timeout=args.timeout)
    rows, bad, world = [], 0, None
    started = time.monotonic()
    for path in sorted((root / "msccl-xml").glob("*/*.xml")):
        found = re.search(r'ngpus="(\d+)"', path.read_text(encoding="latin-1"))
        if not found or int(found.group(1)) > args.max_ranks:
            continue
        name = f"{path.parent.name}/{path.name}"
        try:
            runnable = load_runnable(str(path))
        except SynthError as exc:
            rows.append((name, "-", f"not run: {exc}", "-", 0.0))
            continue
        verdict = precheck(runnable)
        label = {True: "correct", False: "INCORRECT", None: "not judged"}[verdict.correct]
        if world is None or world.ranks != runnable.ranks:
            if world is not None:
                world.close()
            world = World(runnable.ranks, "gloo", args.timeout)
        t0 = time.monotonic()
        result = world.run(runnable, options)
        seconds = time.monotonic() - t0
        outcome = "correct" if result.correct else _short(result.fault)
        if verdict.correct is False:
            plain, forced = "refused (exit 4)", outcome
            bad += seconds > len(options.sizes) * args.timeout + GRACE or result.correct
        else:
            plain, forced = outcome, "(same)"
            bad += verdict.correct is True and not result.correct
        rows.append((name, label, plain, forced, seconds))
        print(f"{name}: {label}, {plain}, {forced} ({seconds:.1f} s)", file=sys.stderr, flush=True)
    if world is not None:
        world.close()
    print(f"# MSCCL XML corpus, up to {args.max_ranks} ranks, gloo, sizes {args.sizes}, timeout {args.timeout:g} s; "
          f"{time.monotonic() - started:.0f} s")
    print("| file | replay | synth run | synth run --force | s |")
    print("|---|---|---|---|---|")
    for name, label, plain, forced, seconds in rows:
        print(f"| {name} | {label} | {plain} | {forced} | {seconds:.1f} |")
    counts: dict[str, int] = {}
    for _, label, plain, _, _ in rows:
        key = f"{label} -> {'correct' if plain == 'correct' else plain.split(':')[0]}"
        counts[key] = counts.get(key, 0) + 1
    print("\n" + "; ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    return 1 if bad else 0


def _short(fault: str) -> str:
    return fault if len(fault) <= 160 else fault[:157] + "..."


if __name__ == "__main__":
    sys.exit(main())
