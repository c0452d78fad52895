"""Exporters: a Program -> text in one on-disk format.

``EXPORTERS`` maps a format name to (description, function(program, runtime) -> text);
``export_schedule`` lowers a schedule and renders it in one step.

>>> sorted(EXPORTERS)
['msccl-xml', 'program-json']
"""

from __future__ import annotations

from typing import Callable

from synth.program.ir import Program


def _msccl_xml(program: Program, runtime: str | None) -> str:
    from synth.exporters.msccl_xml import program_to_xml

    return program_to_xml(program, runtime or "executor")


def _program_json(program: Program, runtime: str | None) -> str:
    from synth.program.document import program_to_json

    return program_to_json(program)


EXPORTERS: dict[str, tuple[str, Callable[[Program, str | None], str]]] = {
    "msccl-xml": ("MSCCL algorithm XML (legacy msccl, msccl-executor-nccl, RCCL)", _msccl_xml),
    "program-json": ("synth.program v1 JSON (thread blocks, ops, dependencies)", _program_json),
}


def export_schedule(schedule, fmt: str, options) -> tuple[str, Program]:
    """(file text, program) for ``schedule`` lowered with ``options`` (a LoweringOptions) in format ``fmt``."""
    from synth.core.errors import InputError
    from synth.lower.lowering import lower

    if fmt not in EXPORTERS:
        raise InputError(f"unknown export format {fmt!r}; known: {', '.join(EXPORTERS)}")
    program = lower(schedule, options)
    return EXPORTERS[fmt][1](program, options.runtime), program
