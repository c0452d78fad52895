"""``synth topo``, ``synth coll`` and ``synth verify``: the model's commands (topologies, collectives,
schedule files)."""

from __future__ import annotations

import json
import sys

from synth.cli.common import add_coll_options, collective_of, topology_of
from synth.core.errors import EXIT_INVALID, InputError


def add_model_parsers(sub) -> None:
    """Add ``topo list|show``, ``coll list|show`` and ``verify`` to ``sub``."""
    topo = sub.add_parser("topo", help="topologies: list, show, import (nvidia-smi, NCCL XML, rocm-smi), detect")
    topo_sub = topo.add_subparsers(dest="topo_command", parser_class=type(topo), metavar="ACTION")
    p = topo_sub.add_parser("list", help="list library topologies and generators")
    p.set_defaults(func=cmd_topo_list)
    p = topo_sub.add_parser("show", help="describe a topology (name, generator, NAMExK or file)")
    p.add_argument("topology")
    p.add_argument("--json", action="store_true", help="print the synth.topology document")
    p.set_defaults(func=cmd_topo_show)
    p = topo_sub.add_parser("import", help="a synth.topology from nvidia-smi topo -m, NCCL's topology XML dump or "
                                           "rocm-smi --showtopo output")
    p.add_argument("file", help="the tool's output, as pasted (tabs or spaces, with or without legends)")
    p.add_argument("--format", default="auto", choices=("auto", "nvidia-smi", "nccl-xml", "rocm-smi"))
    p.add_argument("--nvlink", choices=("switch", "none"),
                   help="for NCCL topology files that list GPUs by PCI class only (no NVLink stated): switch = "
                        "every GPU has one NVSwitch port of the --gpu model's NVLinks, none = PCIe only")
    _add_import_options(p)
    p.set_defaults(func=cmd_topo_import)
    p = topo_sub.add_parser("detect", help="run the topology tools present here and import what they print")
    _add_import_options(p)
    p.set_defaults(func=cmd_topo_detect)

    coll = sub.add_parser("coll", help="collectives: list, show")
    coll_sub = coll.add_subparsers(dest="coll_command", parser_class=type(coll), metavar="ACTION")
    p = coll_sub.add_parser("list", help="list collectives")
    p.set_defaults(func=cmd_coll_list)
    p = coll_sub.add_parser("show", help="show a collective's pre/post conditions")
    p.add_argument("collective")
    p.add_argument("-n", "--ranks", type=int, help="number of ranks")
    add_coll_options(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_coll_show)

    p = sub.add_parser("verify", help="replay a synth.schedule file; exit 0 valid, 4 invalid, 2 unreadable")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)


def cmd_topo_list(args) -> int:
    """One line per library machine, cloud shape, generator and syntax; a machine's or shape's line
    names what its switches can do (its description, else a note after it)."""
    from synth.core.library import LINK_NOTE, list_topologies, load_machine, machine_names
    from synth.core.topology_summary import switch_note

    rows = list_topologies()
    machines = set(machine_names())
    width = max(len(name) for name, _ in rows)
    for name, description in rows:
        note = switch_note(load_machine(name), description) if name in machines else ""
        print(f"{name:<{width}}  {description}{note}")
    print(LINK_NOTE)
    return 0


def cmd_topo_show(args) -> int:
    from synth.core.topology_summary import describe

    topo = topology_of(args.topology)
    if args.json:
        print(json.dumps(topo.to_dict(), indent=1))
    else:
        print(describe(topo))
    return 0


def _add_import_options(p) -> None:
    p.add_argument("--gpu", metavar="MODEL", help="GPU model (V100, A100, H100, B300, RTX4090, MI300X, ...): sets "
                                                  "the NVLink/xGMI per-link bandwidth and PCIe generation")
    p.add_argument("--nic-gbps", type=float, metavar="G", help="NIC speed in Gb/s (default: the file's, else the "
                                                               "usual one for the GPU)")
    p.add_argument("--nodes", type=int, default=1, metavar="K", help="K copies joined through their NICs, as the "
                                                                      "library's NAMExK")
    p.add_argument("--nvls", choices=("on", "off"),
                   help="NVLink SHARP in the NVSwitch (a switch that reduces and multicasts): default on for NVSwitch "
                        "boards of Hopper or newer (H100, H200, B200, B300, GB200, ...), off otherwise; on needs an "
                        "NVSwitch")
    p.add_argument("--cpu", choices=("intel", "amd", "power", "arm"),
                   help="CPU family, for the CPU-to-CPU interconnect of PCIe paths across sockets (default intel)")
    p.add_argument("--name", help="topology name (default: from the file name)")
    p.add_argument("-o", "--output", help="write the synth.topology JSON here (default: print it)")


def _import_options(args) -> dict:
    if args.nodes < 1:
        raise InputError(f"--nodes must be at least 1, got {args.nodes}")
    if args.nic_gbps is not None and not (0 < args.nic_gbps < 1e6):
        raise InputError(f"--nic-gbps must be a positive number of Gb/s, got {args.nic_gbps}")
    if args.gpu:
        from synth.importers.gpus import model

        model(args.gpu)  # an unknown name is one line before the file is read
    return {"gpu": args.gpu, "nic_gbps": args.nic_gbps, "nodes": args.nodes, "name": args.name, "cpu": args.cpu,
            "nvlink": getattr(args, "nvlink", None), "nvls": args.nvls}


def _write_topology(topo, output: str | None) -> int:
    from synth.cli.common import write_or_print
    from synth.core.topology import Topology
    from synth.core.topology_summary import describe

    doc = topo.to_dict()
    Topology.from_dict(doc, where="imported topology")  # what we write reads back
    write_or_print(doc, output)
    if output not in (None, "-"):
        print(describe(topo).splitlines()[0], file=sys.stderr)
    return 0


def cmd_topo_import(args) -> int:
    from synth.importers.reader import import_file

    options = _import_options(args)
    return _write_topology(import_file(args.file, fmt=args.format, **options), args.output)


def cmd_topo_detect(args) -> int:
    from synth.importers.detect import detect_text
    from synth.importers.reader import import_text

    options = _import_options(args)
    fmt, command, text = detect_text()
    options["name"] = options["name"] or "detected"
    return _write_topology(import_text(text, f"'{command}' output", fmt=fmt, **options), args.output)


def cmd_coll_list(args) -> int:
    from synth.core.collectives import FILE_KINDS, REGISTRY

    for name, kind in sorted(REGISTRY.items()):
        rooted = " (rooted: --root R)" if kind.rooted else ""
        print(f"{name:<15} {kind.description}{rooted}")
    for name, text in sorted(FILE_KINDS.items()):
        print(f"{name:<15} {text}")
    return 0


def cmd_coll_show(args) -> int:
    ranks = args.ranks
    if ranks is None:
        if ":" in args.collective or args.collective.endswith(".json"):
            ranks = -1
        else:
            raise InputError("coll show needs -n N (the number of ranks)")
    coll = collective_of(args.collective, ranks if ranks > 0 else _ranks_of_file(args.collective), args.root,
                         args.chunks)
    if args.json:
        print(json.dumps(coll.to_dict(), indent=1))
        return 0
    print(f"{coll.name}: {coll.ranks} ranks, {coll.chunks} chunks, buffer {coll.buffer_chunks} chunks, "
          f"{'combining' if coll.combining else 'non-combining'}"
          + (f", root {coll.root}" if coll.root is not None else ""))
    for c, (pre, post) in enumerate(zip(coll.pre, coll.post)):
        print(f"  chunk {c:>3}: pre {sorted(pre)} -> post {sorted(post)}")
    return 0


def _ranks_of_file(spec: str) -> int:
    """Rank count of a file-based collective (read from the file itself)."""
    from synth.core.io import read_json

    kind, _, path = spec.partition(":")
    path = path or spec
    doc = read_json(path)
    if kind == "alltoallv":
        rows = doc.get("chunks") if isinstance(doc, dict) else doc
        return len(rows) if isinstance(rows, list) else 0
    if isinstance(doc, dict) and type(doc.get("ranks")) is int:
        return doc["ranks"]
    raise InputError(f"{path}: cannot tell the number of ranks (no integer 'ranks'); give -n N")


def cmd_verify(args) -> int:
    from synth.verify import load_schedule, verify

    schedule = load_schedule(args.file, check=False)
    violations = verify(schedule)
    coll, topo = schedule.collective, schedule.topology
    summary = (f"{coll.name} on {topo.name}: {len(schedule.steps)} steps, "
               f"{schedule.traffic_text}, rounds {schedule.total_rounds}")
    if args.json:
        print(json.dumps({
            "valid": not violations,
            "violations": [{"step": v.step, "kind": v.kind, "message": v.message} for v in violations],
        }, indent=1))
    elif violations:
        print(f"INVALID {summary}: {len(violations)} violation(s)")
        for v in violations:
            print(f"  {v}")
    else:
        print(f"valid {summary}")
    return EXIT_INVALID if violations else 0
