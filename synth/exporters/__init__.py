"""Exporters: a Program -> text in one on-disk format, each described once by an ``Exporter``.

``EXPORTERS`` maps a format name to its record: what it writes, the file suffix, how it renders
a program for a runtime, the runtime it targets when none is given, and how a file names the
runtime it was written for. ``synth export`` (its ``--format`` choices and defaults) and the
selection exporter (file names, which files an earlier export wrote) derive from these records.
``export_schedule`` lowers a schedule and renders it in one step. Two formats carry no program:
``nccl-tuner`` and ``nccl-env`` write stock NCCL's own settings for a whole collective
(``synth.tuner``: the fastest algorithm, protocol and channel count per size), from a size
selection (``synth report``'s selection.json) or ``synth tune``; their ``render`` is None. One
lowers the schedule itself: ``mscclpp-json`` (``synth.mscclpp.lower``: an MSCCL++ execution plan).

>>> sorted(EXPORTERS), EXPORTERS["msccl-xml"].suffix, EXPORTERS["msccl-xml"].default_runtime
(['msccl-xml', 'mscclpp-json', 'nccl-env', 'nccl-tuner', 'program-json'], '.xml', 'executor')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the program model is imported where an exporter runs: building the CLI stays light
    from synth.program.ir import Program


@dataclass(frozen=True)
class Exporter:
    """One on-disk format: ``render(program, runtime) -> text``; ``mark(text, runtime) -> text``
    names the runtime in the file where the format needs it said outside the program (None: the
    rendered text already says it, or the format has no runtime)."""

    name: str
    description: str
    suffix: str
    render: Callable[[Program, str | None], str] | None  # None: no MSCCL program (NCCL's settings, a plan)
    default_runtime: str | None = None
    mark: Callable[[str, str], str] | None = None
    plan: Callable[[Any, Any], str] | None = None  # (schedule, LoweringOptions) -> text: lowers itself

    @property
    def writes_programs(self) -> bool:
        """One file per schedule (an MSCCL program or an MSCCL++ plan), not NCCL's settings."""
        return self.render is not None or self.plan is not None

    def runtime(self, given: str | None) -> str | None:
        """The runtime a file is written for: the one given, else the format's default."""
        return given or self.default_runtime

    def marked(self, text: str, runtime: str | None) -> str:
        """``text`` as written to disk: with the runtime named where the format needs it."""
        return self.mark(text, runtime) if self.mark is not None and runtime else text


def _msccl_xml(program: Program, runtime: str | None) -> str:
    from synth.exporters.msccl_xml import program_to_xml

    return program_to_xml(program, runtime or "executor")


def _mark_msccl(text: str, runtime: str) -> str:
    from synth.msccl.target import mark

    return mark(text, runtime)


def _mscclpp_plan(schedule, options) -> str:
    import json

    from synth.core.errors import InputError
    from synth.mscclpp.lower import PlanOptions, lower_plan

    if options.protocol not in ("Simple", "LL"):
        raise InputError(f"MSCCL++ plans run Simple or LL, not {options.protocol}")
    plan = PlanOptions(protocol=options.protocol, version=options.mscclpp_version or "0.10",
                       inplace=options.inplace, min_bytes=options.min_bytes, max_bytes=options.max_bytes,
                       name=options.name, max_threadblocks=options.max_threadblocks)
    return json.dumps(lower_plan(schedule, plan), indent=1) + "\n"


def _program_json(program: Program, runtime: str | None) -> str:
    from synth.program.document import program_to_json

    return program_to_json(program)  # the runtime is in the program's meta.lowering


EXPORTERS: dict[str, Exporter] = {
    exporter.name: exporter
    for exporter in (
        Exporter("msccl-xml", "MSCCL algorithm XML (legacy msccl, msccl-executor-nccl, RCCL)", ".xml", _msccl_xml,
                 default_runtime="executor", mark=_mark_msccl),
        Exporter("program-json", "synth.program v1 JSON (thread blocks, ops, dependencies)", ".program.json",
                 _program_json),
        Exporter("mscclpp-json", "an MSCCL++ execution plan (mscclpp >= 0.8): memory and port channels, "
                                 "explicit signals; Simple or LL", ".mscclpp.json", None, plan=_mscclpp_plan),
        Exporter("nccl-tuner", "the config of NCCL's example tuner plugin: stock NCCL's fastest algorithm, "
                               "protocol and channels per size (from a selection; or synth tune)", ".conf", None),
        Exporter("nccl-env", "NCCL_ALGO / NCCL_PROTO per collective (NCCL >= 2.24.3) and what they cannot say",
                 ".env", None),
    )
}
PROGRAM_FORMATS = tuple(name for name, e in EXPORTERS.items() if e.writes_programs)


def exporter(fmt: str) -> Exporter:
    """The record of format ``fmt``; InputError naming the known ones otherwise."""
    from synth.core.errors import InputError

    if fmt not in EXPORTERS:
        raise InputError(f"unknown export format {fmt!r}; known: {', '.join(EXPORTERS)}")
    return EXPORTERS[fmt]


def export_schedule(schedule, fmt: str, options) -> tuple[str, Program | None]:
    """(file text, program) for ``schedule`` lowered with ``options`` (a LoweringOptions) in format
    ``fmt``; the program is None for a format that lowers the schedule itself (an MSCCL++ plan)."""
    from synth.core.errors import InputError
    from synth.lower.lowering import lower

    record = exporter(fmt)
    if not record.writes_programs:
        raise InputError(f"--format {fmt} writes NCCL's own settings for a whole collective, not a schedule: give "
                         "synth report's selection.json, or run 'synth tune TOPO'")
    if schedule.collective.name in ("moe_dispatch", "moe_combine"):
        return _moe_program(schedule, fmt, options, record)
    if record.plan is not None:
        return record.plan(schedule, options), None
    program = lower(schedule, options)
    return record.render(program, options.runtime), program


def _moe_program(schedule, fmt: str, options, record) -> tuple[str, Program]:
    """A MoE dispatch/combine as a synth.program (each rank's buffers its own token rows, as synth
    run lays them out); MSCCL and MSCCL++ have no such collective, so their formats refuse it."""
    from synth.core.errors import InputError
    from synth.runtime.moe import MoeTokens, lower_moe

    if fmt != "program-json":
        raise InputError(f"MSCCL and MSCCL++ runtimes have no {schedule.collective.name} collective; --format "
                         "program-json writes its Program, and 'synth run' runs the schedule file itself")
    program = lower_moe(schedule, MoeTokens.of(schedule.collective, "the schedule"), options)
    return record.render(program, options.runtime), program
