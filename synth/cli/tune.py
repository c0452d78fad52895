"""``synth tune TOPO -o nccl_tuner.conf``: stock NCCL tuned by synth's model (synth.tuner).

Wired into synth.cli.main by ``add_tune_parser(sub)``. Writes the config file of NCCL's example
tuner plugin (``--format nccl-tuner``, the default) or the ``NCCL_ALGO`` / ``NCCL_PROTO`` settings
(``--format nccl-env``) to ``-o`` (``-`` for stdout), atomically; one stderr line per table: its
ranges and how much slower NCCL's own pick is. Bad input (an unknown collective, a communicator
the machine does not have, a bad calibration) is one line, exit 2, nothing written.
"""

from __future__ import annotations

import sys

FORMATS = ("nccl-tuner", "nccl-env")


def add_tune_parser(sub) -> None:
    """Add ``tune`` to ``sub`` (cli.py's subparsers action)."""
    p = sub.add_parser("tune", help="NCCL's fastest algorithm, protocol and channel count per size in synth's model, "
                                    "as the config of NCCL's example tuner plugin (or NCCL_ALGO/NCCL_PROTO)")
    p.add_argument("topology", help="library name, generator (ring:8) or synth.topology file")
    p.add_argument("--calibration", metavar="CAL", default="default",
                   help="the runtime terms to cost with: a synth.calibration file (synth calibrate), or 'default'")
    p.add_argument("--collectives", metavar="LIST",
                   help="comma-separated: allreduce, allgather, reduce_scatter, broadcast, reduce (default: all five)")
    p.add_argument("--nodes-ranks", metavar="NxR,...",
                   help="communicators to write tables for, as nodes x ranks (1x8,2x16): the first R/N GPUs of "
                        "each of the first N machines (default: the whole topology)")
    p.add_argument("--format", choices=FORMATS, default="nccl-tuner",
                   help="nccl-tuner: the plugin's config file (default); nccl-env: NCCL_ALGO / NCCL_PROTO lines "
                        "(NCCL >= 2.24.3) and what they cannot express")
    p.add_argument("--buffers", choices=("none", "local", "symmetric"),
                   help="how the calls' buffers are registered: lines match only such calls (the tuner's regBuff), "
                        "and with a symmetric window (NCCL >= 2.27) no line is written where NCCL runs its symmetric "
                        "kernels before asking the tuner (default: lines for any buffers)")
    p.add_argument("-o", "--output", required=True, help="file to write ('-': stdout)")
    p.set_defaults(func=cmd_tune)


def cmd_tune(args) -> int:
    from synth.cli.common import progress, topology_of
    from synth.core.io import write_text_atomic
    from synth.measure.calibration import load_calibration
    from synth.tuner.env import env_text
    from synth.tuner.tune import config_text, parse_collectives, parse_communicators, tune

    collectives = parse_collectives(args.collectives)
    communicators = parse_communicators(args.nodes_ranks)
    calibration = load_calibration(args.calibration)
    topology = topology_of(args.topology)
    label = args.calibration
    tuned = tune(topology, collectives, communicators, calibration, label, args.buffers)
    text = config_text(topology, tuned, label) if args.format == "nccl-tuner" else env_text(tuned)
    for table in tuned:
        progress(table.summary())
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    write_text_atomic(args.output, text)
    progress(f"wrote {args.output} ({sum(len(t.lines) for t in tuned)} lines; synth check {args.output} reads it "
             "as the plugin does)" if args.format == "nccl-tuner" else f"wrote {args.output}")
    return 0
