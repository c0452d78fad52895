"""``synth routing make|show``: synthetic mixture-of-experts routings, and what one asks.

Wired into synth.cli.main by ``add_routing_parser(sub)``; functions return exit codes.
"""

from __future__ import annotations

import json


def add_routing_parser(sub) -> None:
    """Add ``routing make`` and ``routing show`` to ``sub``."""
    routing = sub.add_parser("routing", help="mixture-of-experts routings (synth.routing): make one, show one")
    actions = routing.add_subparsers(dest="routing_command", parser_class=type(routing), metavar="ACTION")
    p = actions.add_parser("make", help="a seeded synthetic routing (not a trace of a real model; docs/moe.md)")
    p.add_argument("--ranks", type=int, required=True, help="ranks (GPUs)")
    p.add_argument("--experts", type=int, required=True, help="experts, placed in contiguous blocks over the ranks")
    p.add_argument("--topk", type=int, required=True, help="experts per token")
    p.add_argument("--tokens", type=int, required=True, help="tokens per rank (the mean, with --imbalance)")
    p.add_argument("--token-bytes", type=int, required=True, help="bytes per token (hidden x element size)")
    p.add_argument("--popularity", default="uniform", help="uniform, or zipf:S (the k-th expert weighs k^-S)")
    p.add_argument("--imbalance", type=float, default=1.0, help="the busiest rank has F x the mean tokens (default 1)")
    p.add_argument("--max-machines", type=int, help="node-limited routing: each token's experts on at most M machines")
    p.add_argument("--machine-ranks", type=int, default=8, help="ranks per machine for --max-machines (default 8)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-o", "--output", help="routing file to write (default: stdout)")
    p.set_defaults(func=cmd_routing_make)
    p = actions.add_parser("show", help="a routing's figures: tokens, destinations, machines to enter, dedup")
    p.add_argument("file")
    p.add_argument("--topology", help="a topology whose machines to count (e.g. h100x4)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_routing_show)


def cmd_routing_make(args) -> int:
    from synth.cli.common import write_or_print
    from synth.moe.generate import make_routing

    routing = make_routing(args.ranks, args.experts, args.topk, args.tokens, args.token_bytes, args.popularity,
                           seed=args.seed, imbalance=args.imbalance, max_machines=args.max_machines,
                           machine_ranks=args.machine_ranks)
    write_or_print(routing.to_doc(), args.output)
    return 0


def cmd_routing_show(args) -> int:
    from synth.cli.common import topology_of
    from synth.core.errors import InputError
    from synth.core.routing import load_routing
    from synth.moe.summary import summarize

    routing = load_routing(args.file)
    machines = None
    if args.topology:
        topo = topology_of(args.topology)
        if topo.ranks != routing.ranks:
            raise InputError(f"{args.file}: 'ranks' is {routing.ranks} but {topo.name} has {topo.ranks} ranks")
        machines = topo.machines or [list(range(topo.ranks))]
    doc = summarize(routing, machines)
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    per = doc["tokens_per_rank"]
    print(f"{args.file}: {doc['tokens']} tokens of {doc['token_bytes']} bytes on {doc['ranks']} ranks, "
          f"{doc['experts']} experts, {doc['experts_per_token']:.3g} per token; S = {doc['size_bytes']} bytes")
    print(f"  tokens per rank: min {per['min']}, mean {per['mean']:.1f}, max {per['max']}")
    print(f"  destination ranks per token: {doc['destinations_per_token']:.3g}; the hottest rank needs "
          f"{100 * doc['hottest_rank_share']:.1f}% of all tokens")
    if machines:
        print(f"  other machines per token: {doc['remote_machines_per_token']:.3g} (remote ranks "
              f"{doc['remote_ranks_per_token']:.3g}): one copy per rank sends {doc['dedup']:.3g}x the network "
              f"copies needed; the busiest machine takes in {doc['hottest_machine_share']:.3g}x the mean")
    return 0
