"""``synth sketch show|check``: the derived default sketch, and validating a sketch file.

Wired into synth.cli.main by ``add_sketch_parser(sub)``; functions return exit codes like cli.py's.
"""

from __future__ import annotations

import json


def add_sketch_parser(sub) -> None:
    """Add ``sketch show`` and ``sketch check`` to ``sub`` (cli.py's subparsers action)."""
    sketch = sub.add_parser("sketch", help="communication sketches for the MILP router: show, check")
    actions = sketch.add_subparsers(dest="sketch_command", parser_class=type(sketch), metavar="ACTION")
    p = actions.add_parser("show", help="the default sketch derived for a topology, with the reasons")
    p.add_argument("topology")
    p.add_argument("--collective", help="the collective it is for (rooted ones get no symmetry)")
    p.add_argument("--size", help="expected message size (bytes, K/M/G/T = 1024^k; default 1G)")
    p.add_argument("--json", action="store_true", help="print the synth.sketch document")
    p.set_defaults(func=cmd_sketch_show)
    p = actions.add_parser("check", help="validate a synth.sketch file against a topology")
    p.add_argument("file")
    p.add_argument("topology")
    p.set_defaults(func=cmd_sketch_check)


def cmd_sketch_show(args) -> int:
    from synth.core.library import resolve_topology
    from synth.cost import parse_size
    from synth.milp.sketch import default_sketch

    topo = resolve_topology(args.topology)
    size = None if args.size is None else parse_size(args.size)
    sketch, reasons = default_sketch(topo, args.collective, size)
    if args.json:
        print(json.dumps(sketch.to_dict(), indent=1))
        return 0
    machines = f"{topo.machine_count} machines" if topo.machine_count > 1 else "one machine"
    print(f"default sketch for {topo.name} ({topo.ranks} ranks, {machines})"
          + (f" and {args.collective}" if args.collective else "") + ":")
    for line in reasons:
        print(f"  {line}")
    return 0


def cmd_sketch_check(args) -> int:
    from synth.core.library import resolve_topology
    from synth.milp.sketch import load_sketch

    topo = resolve_topology(args.topology)
    sketch = load_sketch(args.file, topo)
    print(f"ok: {args.file} fits {topo.name}: " + "; ".join(sketch.describe()))
    return 0
