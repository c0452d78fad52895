"""``synth bounds``, ``synth cost`` and ``synth baseline``: limits, costs, and the classic algorithms."""

from __future__ import annotations

import json
import sys

from synth.cli.common import add_calibration_option, add_coll_options, collective_of, terms_of, topology_of, write_or_print
from synth.cost import PROTOCOL_CHOICES

DEFAULT_COST_SIZES = "1K,64K,1M,16M,256M,1G"


def add_evaluate_parsers(sub) -> None:
    """Add ``bounds``, ``cost`` and ``baseline`` to ``sub``."""
    p = sub.add_parser("bounds", help="lower bounds: steps, rounds per chunk, time, algbw/busbw")
    p.add_argument("topology")
    p.add_argument("collective")
    add_coll_options(p)
    p.add_argument("--size", default="1G", help="collective size S (bytes, K/M/G = 1024^k; default 1G)")
    add_calibration_option(p, "bound what a runtime can reach: link rates times their efficiency, its latencies "
                              "and launch floor (a synth.calibration file, or 'default')")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bounds)

    p = sub.add_parser("cost", help="cost of a schedule file over sizes, both models, %% of the bound")
    p.add_argument("file")
    p.add_argument("--sizes", default=DEFAULT_COST_SIZES, help=f"comma-separated sizes (default {DEFAULT_COST_SIZES})")
    p.add_argument("--protocol", choices=PROTOCOL_CHOICES,
                   help="ideal: the contract model (default); simple, ll128, ll: NCCL's protocol factors "
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
    add_calibration_option(p, "nccl: choose the fastest option under a runtime's terms (a synth.calibration "
                              "file, or 'default')")
    p.add_argument("-o", "--output", help="schedule file to write (default: stdout)")
    p.set_defaults(func=cmd_baseline)


def cmd_bounds(args) -> int:
    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import format_size, parse_size

    topo = topology_of(args.topology)
    coll = collective_of(args.collective, topo.ranks, args.root, args.chunks)
    coll.check_on(topo)
    size = parse_size(args.size)
    terms = terms_of(args)
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
    print(f"lower bounds for {coll.name} on {topo.name} ({topo.ranks} ranks){under}")
    print(f"  steps              >= {doc['steps']}")
    print(f"  rounds per chunk   >= {doc['rounds_per_chunk'] or 'n/a (capacities are not whole numbers)'}")
    print(f"  time at {format_size(size):>6}     >= {doc['time_us']:.4g} us")
    print(f"  algbw              <= {doc['algbw_gbps']:.4g} GB/s")
    print(f"  busbw              <= {doc['busbw_gbps']:.4g} GB/s")
    if doc.get("binding"):
        print(f"  binding: {doc['binding']}")
    proven = doc.get("proven")
    if proven:
        print(f"  (the composition figure is what reports compare with; a schedule that reduces in"
              f" flight can beat it: the proven limit is rounds per chunk >= {proven.get('rounds_per_chunk')},"
              f" busbw <= {proven.get('busbw_gbps'):.4g} GB/s)")
    return 0


def cmd_cost(args) -> int:
    from synth.bounds.lower_bounds import lower_bounds
    from synth.cost import UNKNOWN_KIND_ROW, cost_rows, format_size, parse_sizes, untyped_links
    from synth.core.io import load_schedule

    schedule = load_schedule(args.file)
    sizes = parse_sizes(args.sizes)
    terms = terms_of(args)
    protocol = args.protocol or ("ideal" if terms is None else "best")
    if terms is None:
        bounds = lower_bounds(schedule.topology, schedule.collective)
    else:
        from synth.bounds.runtime import runtime_bounds

        bounds = runtime_bounds(schedule.topology, schedule.collective, terms)
    rows = cost_rows(schedule, sizes, bounds, protocol, terms)
    coll, topo = schedule.collective, schedule.topology
    untyped = untyped_links(topo)
    if untyped and protocol != "ideal":
        print(f"note: {untyped} of {len(topo.links)} links of {topo.name} have no kind; "
              f"costed with NCCL's {UNKNOWN_KIND_ROW} latency row", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{coll.name} on {topo.name}: {len(schedule.steps)} steps, {schedule.send_count} sends "
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
    return 0


def cmd_baseline(args) -> int:
    from synth.baselines import applicable, build_baseline
    from synth.core.errors import InputError
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
    terms = terms_of(args)
    if terms is not None and args.algo != "nccl":
        raise InputError(f"--calibration chooses among NCCL's options (--algo nccl); {args.algo} has one schedule: "
                         "cost it with synth cost --calibration")
    schedule = build_baseline(topo, args.algo, name, args.root, args.chunks, size, terms=terms)
    write_or_print(schedule.to_dict(), args.output)
    return 0
