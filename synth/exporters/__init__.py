"""Exporters: a Program -> text in one on-disk format.

``EXPORTERS`` maps a format name to (description, function(program, runtime) -> text).

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
    from synth.exporters.program_json import program_to_json

    return program_to_json(program)


EXPORTERS: dict[str, tuple[str, Callable[[Program, str | None], str]]] = {
    "msccl-xml": ("MSCCL algorithm XML (legacy msccl, msccl-executor-nccl, RCCL)", _msccl_xml),
    "program-json": ("synth.program v1 JSON (thread blocks, ops, dependencies)", _program_json),
}
