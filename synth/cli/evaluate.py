"""``synth bounds``, ``synth cost`` and ``synth baseline``: limits, costs, and the classic algorithms."""

from __future__ import annotations

import json
import sys

from synth.cli.common import (
    add_calibration_option,
    add_coll_options,
    collective_of,
    protocol_choice,
    terms_of,
    topology_of,
    write_or_print,
)
from synth.core.errors import InputError

DEFAULT_COST_SIZES = "1K,64K,1M,16M,256M,1G"


def add_evaluate_parsers(sub) -> None:
    """Add ``bounds``, ``cost`` and ``baseline`` to ``sub``."""
    p = sub.add_parser("bounds", help="lower bounds: steps, rounds per chunk, time, algbw/busbw")
    p.add_argument("topology")
    p.add_argument("collective")
    add_coll_options(p)
    p.add_argument("--size", help="collective size S (bytes, K/M/G = 1024^k; default 1G, or the size a routing "
                                  "fixes: tokens x token_bytes)")
    add_calibration_option(p, "bound what a runtime can reach: link rates times their efficiency, its latencies "
                              "and launch floor (a synth.calibration file, or 'default')")
    p.add_argument("--launch", choices=("eager", "graph"), default="eager",
                   help="with --calibration: calls issued eagerly (the CPU's launch floor) or replayed from a CUDA "
                        "graph (no CPU floor, NCCL's own latencies, no per-call latency beyond the links')")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bounds)

    p = sub.add_parser("cost", help="cost of a schedule file over sizes, both models, %% of the bound")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="schedule file(s); with several (same collective and ranks) a last line compares the "
                        "first with each other")
    p.add_argument("--sizes", help=f"comma-separated sizes (default {DEFAULT_COST_SIZES}, or the one size the "
                                   "schedules' collective fixes: a MoE routing's tokens x token_bytes)")
    p.add_argument("--protocol", type=protocol_choice, metavar="PROTOCOL",
                   help="any case; ideal: the contract model (default); simple, ll128, ll: NCCL's protocol factors "
                        "and base latency (docs/cost-model.md); best: the fastest of those per size "
                        "(the default with --calibration)")
    add_calibration_option(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("baseline", help="build a classic algorithm as a verified schedule")
    p.add_argument("topology")
    p.add_argument("collective")
    p.add_argument("--algo", required=True, help="algorithm name, or 'list' for those that apply")
    p.add_argument("--root", type=int, help="root rank of a rooted collective (default 0)")
    p.add_argument("--chunks", type=int, help="pieces per rank/buffer for pipelining (algorithm default)")
    p.add_argument("--size", help="message size S (bytes, K/M/G = 1024^k) for algorithms whose choices depend "
                                  "on it (nccl, nccl_tree: the fastest at S)")
    add_calibration_option(p, "nccl: the option synth tune writes at the size, under a runtime's terms and "
                              "model (a synth.calibration file, or 'default')")
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.set_defaults(func=cmd_baseline)


def cmd_bounds(args) -> int:
    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import format_size, parse_size

    topo = topology_of(args.topology)
    coll = collective_of(args.collective, topo.ranks, args.root, args.chunks)
    size = parse_size(args.size or str(coll.size_bytes or "1G"))
    if args.launch == "graph" and args.calibration is None:
        raise InputError("--launch graph bounds a runtime's calls: give --calibration (the contract model has no "
                         "launch cost to take away)")
    terms = terms_of(args, topo)
    if terms is None:
        bounds = lower_bounds(topo, coll)
    else:
        from synth.bounds.runtime import runtime_bounds

        bounds = runtime_bounds(topo, coll, terms)
    doc = bounds.to_dict(size)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    under = "" if terms is None else f" under the runtime terms of calibration {terms.label}"
    if terms is not None and args.launch == "graph":
        under += ", calls replayed from a CUDA graph"
    print(f"lower bounds for {coll.name} on {topo.name} ({topo.ranks} ranks){under}")
    print(f"  steps              >= {doc['steps']}")
    print(f"  rounds per chunk   >= {_rounds(doc['rounds_per_chunk'])}")
    print(f"  time at {format_size(size):>6}     >= {doc['time_us']:.4g} us")
    print(f"  algbw              <= {doc['algbw_gbps']:.4g} GB/s")
    print(f"  busbw              <= {doc['busbw_gbps']:.4g} GB/s")
    if doc.get("binding"):
        print(f"  binding: {doc['binding']}")
    proven = doc.get("proven")
    if proven and _same_limit(proven, doc):
        print("  (the composition figure is also proven: no allreduce beats it, even one that reduces in flight)")
    elif proven:
        print(f"  (the composition figure is what reports compare with; a schedule that reduces in"
              f" flight can beat it: the proven limit is {_proven_limit(proven)})")
    if topo.switches:
        _print_point_to_point(topo, coll, size, terms, doc)
    return 0


def _print_point_to_point(topo, coll, size: int, terms, doc: dict) -> None:
    """The same bounds with the machine's switches unused, and which of the two binds."""
    from dataclasses import replace

    from synth.bounds.lower_bounds import lower_bounds
    from synth.bounds.runtime import runtime_bounds

    plain = replace(topo, switches=())
    p2p = (lower_bounds(plain, coll) if terms is None else runtime_bounds(plain, coll, terms)).to_dict(size)
    gain = p2p["time_us"] / doc["time_us"] if doc["time_us"] else 1.0
    verdict = ("the switches lift it" if gain > 1 + 1e-9 else
               "the switches do not lift it (what a rank must send or receive binds either way)")
    print(f"  point to point (switches unused): time >= {p2p['time_us']:.4g} us, busbw <= {p2p['busbw_gbps']:.4g} "
          f"GB/s; {verdict}" + (f", {gain:.2f}x" if gain > 1 + 1e-9 else ""))




def _rounds(value) -> str:
    """A rounds-per-chunk bound, or why there is none: rounds exist only where every link and
    group capacity is a whole multiple of the slowest link's bandwidth."""
    return str(value) if value is not None else "n/a (capacities are not whole numbers: no rounds)"


def _same_limit(proven: dict, doc: dict) -> bool:
    """Whether the proven allreduce limit reaches the composition's (algbw and rounds)."""
    close = proven.get("algbw_gbps") is not None and doc.get("algbw_gbps") is not None and \
        proven["algbw_gbps"] <= doc["algbw_gbps"] * (1 + 1e-9)
    return close and proven.get("rounds_per_chunk") == doc.get("rounds_per_chunk")


def _proven_limit(proven: dict) -> str:
    """The proven allreduce limit in words; without whole capacities there is no rounds figure."""
    busbw = f"busbw <= {proven.get('busbw_gbps'):.4g} GB/s"
    rounds = proven.get("rounds_per_chunk")
    if rounds is None:
        return f"{busbw} (no rounds-per-chunk limit: capacities are not whole numbers, so rounds do not apply)"
    return f"rounds per chunk >= {rounds}, {busbw}"


def cmd_cost(args) -> int:
    """One cost table per file; with several files (one collective, one rank count) a last line
    compares the first with each other at every size, each at the same protocol choice."""
    from synth.cost import parse_sizes
    from synth.verify import load_schedule

    terms_of(args)  # a bad calibration is one line before any file is read
    schedules = [load_schedule(path) for path in args.files]
    _check_comparable(args.files, schedules)
    terms = terms_of(args, schedules[0].topology)
    protocol = args.protocol or ("ideal" if terms is None else "best")
    fixed = schedules[0].collective.size_bytes
    sizes = parse_sizes(args.sizes or (str(fixed) if fixed else DEFAULT_COST_SIZES))
    tables = [_cost_table(schedule, sizes, protocol, terms) for schedule in schedules]
    labels = [_label(path, schedule) for path, schedule in zip(args.files, schedules)]
    model = "contract model, no calibration" if terms is None else f"calibration {terms.label}"
    verdict = _verdict(labels, [rows for rows, _ in tables], protocol, model) if len(tables) > 1 else None
    if args.json:
        doc = tables[0][0] if verdict is None else {
            "files": [{"file": path, "schedule": label, "rows": rows}
                      for path, label, (rows, _) in zip(args.files, labels, tables)],
            "verdict": verdict}
        print(json.dumps(doc, indent=1))
        return 0
    for schedule, (rows, _) in zip(schedules, tables):
        _print_table(schedule, rows, terms)
    for line in _column_notes(tables[0][1], protocol, terms, sizes):
        print(line)
    if verdict is not None:
        print(verdict["text"])
    return 0


def _check_comparable(paths: list[str], schedules: list) -> None:
    """Schedules compared side by side must be of one collective and one rank count (InputError)."""
    first = schedules[0].collective
    for path, schedule in zip(paths[1:], schedules[1:]):
        coll = schedule.collective
        if (coll.name, coll.ranks) != (first.name, first.ranks):
            raise InputError(f"{path}: {coll.name} on {coll.ranks} ranks, but {paths[0]} is {first.name} on "
                             f"{first.ranks} ranks: synth cost compares schedules of one collective and rank count")
        if first.chunk_bytes is not None and (coll.pre, coll.post, coll.chunk_bytes) != (
                first.pre, first.post, first.chunk_bytes):
            raise InputError(f"{path}: its {coll.name} is of another routing than {paths[0]}'s: synth cost "
                             "compares schedules of one routing")


def _cost_table(schedule, sizes: list[int], protocol: str, terms):
    """(the cost rows of ``schedule``, the bounds they are judged against); a stderr note when
    links without a kind take NCCL's default latency row."""
    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import UNKNOWN_KIND_ROW, cost_rows, untyped_links

    if terms is None:
        bounds = lower_bounds(schedule.topology, schedule.collective)
    else:
        from synth.bounds.runtime import runtime_bounds

        bounds = runtime_bounds(schedule.topology, schedule.collective, terms)
    topo = schedule.topology
    untyped = untyped_links(topo)
    if untyped and protocol != "ideal":
        print(f"note: {untyped} of {len(topo.links)} links of {topo.name} have no kind; "
              f"costed with NCCL's {UNKNOWN_KIND_ROW} latency row", file=sys.stderr)
    return cost_rows(schedule, sizes, bounds, protocol, terms), bounds


def _print_table(schedule, rows: list[dict], terms) -> None:
    from synth.cost import format_size

    coll, topo = schedule.collective, schedule.topology
    print(f"{coll.name} on {topo.name}: {len(schedule.steps)} steps, {schedule.traffic_text} "
          f"({schedule.meta.get('algorithm') or schedule.meta.get('synthesizer') or 'unnamed'})"
          + ("" if terms is None else f"; runtime terms of calibration {terms.label}, one thread block per "
                                      "link per instance"))
    print(f"{'size':>8} {'protocol':>8} {'step time us':>13} {'sim time us':>12} {'algbw GB/s':>11} "
          f"{'busbw GB/s':>11} {'% of bound':>11}" + ("" if terms is None else f" {'instances':>9}"))
    for row in rows:
        frac = row["bound_fraction"]
        print(f"{format_size(row['size']):>8} {row['protocol']:>8} {row['step_time_us']:>13.4f} "
              f"{row['sim_time_us']:>12.4f} {row['algbw_gbps']:>11.3f} {row['busbw_gbps']:>11.3f} "
              f"{(f'{100 * frac:.1f}%' if frac is not None else '-'):>11}"
              + ("" if terms is None else f" {row['channels']:>9}"))


def _column_notes(bounds, protocol: str, terms, sizes: list[int]) -> list[str]:
    """What the columns are, once per command: step time is the DESIGN cost model, sim time the
    event simulator, % of bound the bound's time / step time, and what the bound leaves out at the
    smallest size (why the percentage is low there)."""
    from synth.cost import format_size

    small = min(sizes)
    notes = ["step time: the DESIGN cost model (each step lasts as long as its slowest link or group); sim time: "
             "the event simulator (each send starts when its data and its link are ready)"]
    plain = bounds if terms is None else bounds.bounds
    if plain.bandwidth_time_per_byte * small >= 0.5 * bounds.time_us(small):
        notes.append(f"% of bound: the lower bound's time / step time; at {format_size(small)} the bound is "
                     f"{bounds.time_us(small):.4g} us, mostly bandwidth ({plain.binding})")
    else:
        notes.append(f"% of bound: the lower bound's time / step time; at {format_size(small)} the bound is "
                     f"{bounds.time_us(small):.4g} us, mostly {_small_bound(bounds, protocol, terms)}")
    return notes


def _small_bound(bounds, protocol: str, terms) -> str:
    """What the bound counts at small sizes, and what it leaves out that a schedule pays."""
    from synth.cost import PROTOCOLS, RUNTIME_PROTOCOLS

    if terms is not None:
        b = bounds.bounds
        return (f"the launch cost {terms.launch_us:g} us, or else {b.steps} steps x the smallest alpha "
                f"{b.alpha_min * terms.latency_scale:.3g} us plus the cheapest protocol's call latency "
                f"{bounds.call_us:.3g} us; a schedule pays its own steps' alphas and its protocol's latency")
    steps = f"{bounds.steps} step{'' if bounds.steps == 1 else 's'} x the smallest link alpha {bounds.alpha_min:g} us"
    if protocol == "ideal":
        return f"{steps} (no schedule has fewer steps); more steps or slower links are below 100% there"
    latencies = ", ".join(f"{name} {PROTOCOLS[name].base_us:g}" for name in RUNTIME_PROTOCOLS)
    return (f"{steps}: it leaves out the per-call protocol latency every schedule pays ({latencies} us) "
            "and the protocols' larger alphas, so it is low at small sizes")


def _label(path: str, schedule) -> str:
    """A schedule's name in the verdict: its algorithm, else its file name, with (S,R,C) when known."""
    from pathlib import Path

    name = schedule.meta.get("algorithm") or Path(path).name.removesuffix(".json").removesuffix(".schedule")
    meta = schedule.meta
    if all(meta.get(k) is not None for k in ("steps", "rounds", "chunks")):
        return f"{name} (S={meta['steps']},R={meta['rounds']},C={meta['chunks']})"
    return name


def _verdict(labels: list[str], tables: list[list[dict]], protocol: str, model: str) -> dict:
    """The first schedule against each other: ratio = other's step time / first's, per size,
    worded by ``synth.cost.speedup_text``."""
    from synth.cost import format_size

    comparisons, phrases = [], []
    for label, rows in zip(labels[1:], tables[1:]):
        ratios = [{"size": mine["size"], "ratio": theirs["step_time_us"] / mine["step_time_us"]}
                  for mine, theirs in zip(tables[0], rows)]
        comparisons.append({"other": label, "ratios": ratios})
        parts = [_ratio_phrase(r["ratio"], label if i == 0 else None) + f" at {format_size(r['size'])}"
                 for i, r in enumerate(ratios)]
        phrases.append(", ".join(parts))
    how = f"protocol {protocol}" + (" per size" if protocol == "best" else "")
    text = f"{labels[0]}: " + "; ".join(phrases) + f" (step time, {how}, {model})"
    return {"text": text, "first": labels[0], "protocol": protocol, "model": model, "comparisons": comparisons}


def _ratio_phrase(ratio: float, other: str | None) -> str:
    """'1.32x faster [than X]', '1.10x slower [than X]' or 'level [with X]'."""
    from synth.cost import speedup_text

    word = speedup_text(ratio)
    if other is None:
        return word
    return f"{word} with {other}" if word == "level" else f"{word} than {other}"


def _nccl_as_tuned(args, topo, name: str, size: float | None):
    """``--algo nccl --calibration CAL``: the schedule of the option ``synth tune`` writes at the size
    (``synth.tuner.choice.nccl_schedule``: one choice, two commands)."""
    from synth.baselines.nccl import DEFAULT_SIZE
    from synth.measure.calibration import load_calibration
    from synth.tuner.choice import nccl_schedule

    if args.algo != "nccl":
        raise InputError(f"--calibration chooses among NCCL's options (--algo nccl); {args.algo} has one schedule: "
                         "cost it with synth cost --calibration")
    if args.chunks is not None:
        raise InputError("nccl chooses its own chunking per algorithm; drop --chunks (or pick the algorithm)")
    calibration = load_calibration(args.calibration).on(topo.arch)
    label = "default" if str(args.calibration) == "default" else str(args.calibration)
    return nccl_schedule(topo, name, int(DEFAULT_SIZE if size is None else size), calibration, args.root, label)


def cmd_baseline(args) -> int:
    from synth.baselines import applicable, build_baseline
    from synth.cost import parse_size

    topo = topology_of(args.topology)
    size = parse_size(args.size) if args.size is not None else None
    name = args.collective
    coll = collective_of(name, topo.ranks, args.root, 1)
    coll.check_on(topo)
    if args.algo == "list":
        table = applicable(topo, name, args.root, size)
        if not table:
            print(f"no baseline builds {name}")
        for algo, reason in table.items():
            print(f"{algo:<20} {'applies' if reason is None else 'n/a: ' + reason}")
        return 0
    if args.calibration is not None:
        schedule = _nccl_as_tuned(args, topo, name, size)
    else:
        schedule = build_baseline(topo, args.algo, name, args.root, args.chunks, size)
    write_or_print(schedule.to_dict(), args.output)
    return 0
