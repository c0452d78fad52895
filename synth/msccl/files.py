"""Reading a program file: MSCCL XML as the runtimes' reader reads it, or synth.program JSON.

Shared by ``synth check`` and ``synth run`` (synth.runtime.runnable). A file named ``*.json`` or
``*.gz`` is synth.program JSON; anything else is MSCCL XML, which must hold an ``<algo>`` and must
not end early (cut off inside a tag or with elements never closed).
"""

from __future__ import annotations

from pathlib import Path

from synth.core.errors import InputError
from synth.program.ir import Program


def read_program_file(path: str) -> tuple[Program, object | None]:
    """(program, parsed XML or None for a synth.program JSON file); InputError if unreadable."""
    from synth.msccl.xml_reader import read_xml_file

    if Path(path).suffix in (".json", ".gz"):
        return _load_json(path), None
    parsed = read_xml_file(path)
    if not parsed.algo_count:
        raise InputError(f"{path}: no <algo> element: not an MSCCL algorithm file")
    cut = next((x for x in parsed.lexical if x.truncated), None)
    if cut is not None:
        raise InputError(f"{path}: line {cut.line}: the file ends early: {cut.message}")
    return parsed.program, parsed


def _load_json(path: str) -> Program:
    from synth.core.io import read_json

    try:
        from synth.program.document import program_from_dict
    except ImportError:
        raise InputError(f"{path}: reading synth.program JSON files is not available in this build") from None
    return program_from_dict(read_json(path), where=str(path))
