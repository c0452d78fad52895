"""``synth run FILE``: execute a schedule, synth.program or MSCCL XML file on real processes.

Switch entries (and a program's switch ops) run emulated with point-to-point messages
(synth.runtime.switch_ops), on gloo only: ``--backend nccl`` refuses them in one line.

Wired into synth.cli.main by ``add_run_parser(sub)``. The file is loaded (a schedule is verified
and lowered), replayed by our own checker (a program it finds wrong is refused, exit 4, unless
``--force``), then run by one process per rank (or by this process as one rank of a ``torchrun``
launch) with torch.distributed point-to-point operations, checked bit for bit against torch's own
collective, and timed. Exit codes: 0 every size correct; 4 refused by the checker, a wrong result, a
deadlock or a dead worker (one line on stderr says which); 2 bad input, or torch missing.
"""

from __future__ import annotations

import importlib.util
import json
import sys

from synth.core.errors import EXIT_INVALID, EXIT_OK, InputError, InvalidScheduleError

BACKENDS = ("gloo", "nccl")
EXECUTORS = ("threads", "ordered")
TORCH_HINT = "pip install 'synth[torch]' (the CPU build: pip install torch==2.13.0)"


def add_run_parser(sub) -> None:
    """Add ``run`` to ``sub`` (cli.py's subparsers action)."""
    p = sub.add_parser("run", help="run a schedule, synth.program or MSCCL XML file on real processes with "
                                    "torch.distributed; checked against torch's own collective")
    p.add_argument("file", help="a synth.schedule, synth.program JSON, MSCCL XML or MSCCL++ plan file")
    p.add_argument("--size", action="append", metavar="S",
                   help="call size in bytes (K/M/G = powers of 1024), as nccl-tests counts it; repeatable or "
                        "comma-separated (default 1K,1M; a MoE schedule runs at the size its routing fixes)")
    p.add_argument("--backend", choices=BACKENDS, default="gloo",
                   help="torch.distributed backend: gloo (CPU, default) or nccl (one GPU per rank)")
    p.add_argument("--dtype", default="float32", help="element type (float32, float16, bfloat16, float64, int32, "
                                                      "int64, int8, uint8; default float32)")
    p.add_argument("--iters", type=int, default=10, help="timed iterations per size (default 10; 0: check only)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations before them (default 2)")
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds one execution (the checked run, each timed one) may take before the run is "
                        "declared stuck (default 60)")
    p.add_argument("--force", action="store_true", help="run a program our checker finds wrong, to see what happens")
    p.add_argument("--inplace", action="store_true", help="run the in-place variant (default: out of place "
                                                          "where the program has it)")
    p.add_argument("--root", type=int, help="root rank of a rooted collective read from a program file "
                                            "(default: found from the program)")
    p.add_argument("--executor", choices=EXECUTORS, default="threads",
                   help="threads: a thread per thread block, as MSCCL runs them (default); ordered: one thread "
                        "walking a deadlock-free order of every transfer (fewer thread switches; programs whose "
                        "order has a cycle run threaded)")
    p.add_argument("--vs-torch", action="store_true", help="also time torch.distributed's own collective")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    p.set_defaults(func=cmd_run)


def _sizes(values: list[str] | None) -> tuple[int, ...] | None:
    """The sizes asked for (None: none given; the runnable then chooses, ``run_sizes``)."""
    from synth.cost import parse_sizes

    return tuple(s for v in values for s in parse_sizes(v)) if values else None


def _check_numbers(args) -> None:
    if args.iters < 0 or args.warmup < 0:
        raise InputError("--iters and --warmup must be >= 0")
    if not args.timeout > 0 or args.timeout != args.timeout or args.timeout > 86400:
        raise InputError(f"--timeout must be a number of seconds in (0, 86400], got {args.timeout}")


def cmd_run(args) -> int:
    _check_numbers(args)
    asked = _sizes(args.size)  # bad sizes are one line before anything is read
    from synth.runtime.runnable import check_backend, load_runnable, precheck, run_sizes

    runnable = load_runnable(args.file, inplace=True if args.inplace else None, root=args.root)
    check_backend(runnable, args.backend)
    sizes = run_sizes(runnable, asked)
    if importlib.util.find_spec("torch") is None:
        raise InputError(f"synth run needs PyTorch, which is not installed: {TORCH_HINT}")
    from synth.runtime.data import dtype_of
    from synth.runtime.launcher import World, launched_by_torchrun, leave_joined, run_joined
    from synth.runtime.measure import RunOptions

    dtype = dtype_of(args.dtype)
    if not launched_by_torchrun():
        _check_memory(runnable, sizes, dtype)
    checked = precheck(runnable)
    verdict = {True: "correct", False: "INCORRECT", None: "not judged"}[checked.correct]
    if checked.correct is False and not args.force:
        raise InvalidScheduleError(f"{args.file}: our checker finds the program wrong, so it is not run "
                                   f"(--force runs it anyway): {checked.first_problem}")
    if args.backend == "nccl":
        _check_gpus(runnable.ranks, launched_by_torchrun())
    options = RunOptions(sizes=sizes, dtype=args.dtype, iters=args.iters, warmup=args.warmup,
                         timeout=args.timeout, vs_torch=args.vs_torch, backend=args.backend, executor=args.executor)
    joined = launched_by_torchrun()
    if joined:
        rank, result = run_joined(runnable, options)
        if rank != 0:
            code = EXIT_OK if result.correct else EXIT_INVALID
            leave_joined(result, code)
            return code
    else:
        with World(runnable.ranks, args.backend, args.timeout) as world:
            result = world.run(runnable, options)
    header = _header(args, runnable, checked, verdict)
    if args.json:
        print(json.dumps(_doc(runnable, options, result, verdict), indent=1))
    else:
        for line in header + table(runnable, options, result):
            print(line)
    sys.stdout.flush()
    code = EXIT_OK if result.correct else EXIT_INVALID
    if not result.correct:
        print(f"synth: error: {args.file}: {result.fault or 'the result differs from torch'}", file=sys.stderr)
    if joined:
        leave_joined(result, code)
    return code


def _check_memory(runnable, sizes, dtype) -> None:
    """Refuse sizes whose buffers cannot fit in this machine's memory (all ranks run here)."""
    import os

    from synth.runtime.data import element_size
    from synth.runtime.measure import bytes_needed

    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return
    for size in sizes:
        need = bytes_needed(runnable, size, element_size(dtype))
        if need > 0.8 * available:
            raise InputError(f"--size {size} needs about {need / 2**30:.1f} GiB for the {runnable.ranks} ranks on this "
                             f"machine, which has {available / 2**30:.1f} GiB free; use a smaller size or torchrun "
                             "across machines")


def _check_gpus(ranks: int, joined: bool) -> None:
    import torch

    if not torch.cuda.is_available():
        raise InputError("--backend nccl needs CUDA GPUs and none is visible; use --backend gloo")
    if not joined and torch.cuda.device_count() < ranks:
        raise InputError(f"--backend nccl needs one GPU per rank: the program has {ranks} ranks, "
                         f"{torch.cuda.device_count()} GPU(s) are visible (use gloo, or torchrun across machines)")


def _header(args, runnable, checked, verdict) -> list[str]:
    schedule = "; the schedule verified" if runnable.kind == "schedule" else ""
    lines = [f"# synth run {args.file}: {runnable.describe()}",
             f"# backend {args.backend}, executor {args.executor}, dtype {args.dtype}, {args.warmup} warmup + "
             f"{args.iters} timed iterations per size{schedule}; our checker: {verdict}"
             + (f" ({checked.first_problem})" if checked.first_problem else "")]
    if checked.correct is False:
        lines.append("# --force: running a program our checker finds wrong")
    return lines


def table(runnable, options, result) -> list[str]:
    """nccl-tests' columns: size, count, type, time, algbw, busbw, and whether the result is correct."""
    from synth.core.collective import busbw_factor
    from synth.runtime.data import SHORT, dtype_of

    factor = busbw_factor(runnable.collective, runnable.ranks)
    type_name = SHORT[dtype_of(options.dtype)]
    cols = ["size", "count", "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)"]
    if options.vs_torch:
        cols += ["torch(us)", "torch/ours"]
    cols.append("correct")
    lines = ["#", "# " + "  ".join(f"{c:>12}" for c in cols)[2:]]
    for row in result.rows:
        t = row.time_us
        algbw = row.size / (t * 1e3) if t else None
        cells = [str(row.size), str(row.count), type_name, _f(t, 1), _f(algbw, 3),
                 _f(algbw * factor if algbw is not None else None, 3)]
        if options.vs_torch:
            ratio = row.torch_us / t if t and row.torch_us else None
            cells += [_f(row.torch_us, 1), _f(ratio, 2)]
        cells.append("yes" if row.correct else "NO")
        lines.append("  ".join(f"{c:>12}" for c in cells))
    asked = list(options.sizes)
    got = [r.size for r in result.rows]
    rounded = [(a, g) for a, g in zip(asked, got) if a != g]
    if rounded:
        lines.append("# sizes rounded to whole chunks of whole elements: "
                     + ", ".join(f"{a} -> {g}" for a, g in rounded))
    if len(result.rows) < len(asked):
        lines.append(f"# stopped after {len(result.rows)} of {len(asked)} sizes")
    return lines


def _f(x, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _doc(runnable, options, result, verdict) -> dict:
    return {"file": runnable.source, "collective": runnable.collective, "ranks": runnable.ranks,
            "backend": options.backend, "dtype": options.dtype, "checker": verdict, "correct": result.correct,
            "fault": result.fault,
            "rows": [{"size": r.size, "count": r.count, "time_us": r.time_us, "torch_us": r.torch_us,
                      "correct": r.correct, "fault": r.fault} for r in result.rows]}
