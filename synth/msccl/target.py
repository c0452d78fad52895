"""Which runtime a program file was written for.

``synth export --format msccl-xml`` writes the runtime it lowered for as a comment before the
``<algo>`` element (every runtime's reader skips comments there, format reference section 2):
``<!-- synth export: written for the executor runtime -->``. A synth.program JSON file names it in
``meta.lowering.runtime``. A file that says neither (hand-written, other tools) targets no runtime
in particular: ``synth check`` then judges it against every profile.

>>> text = mark('<algo name="a">\\n</algo>\\n', "rccl")
>>> text.splitlines()[0]
'<!-- synth export: written for the rccl runtime -->'
>>> marked_runtime(text)
'rccl'
>>> marked_runtime('<algo name="a">') is None
True
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from synth.msccl.profiles import PROFILES
from synth.program.ir import Program

_MARK = "<!-- synth export: written for the {} runtime -->"
_MARK_RE = re.compile(r"<!-- synth export: written for the (\w+) runtime -->")
_HEAD_CHARS = 4096  # the mark is the file's first line; never read further than this for it


def mark(text: str, runtime: str) -> str:
    """``text`` (MSCCL XML) with the line naming ``runtime`` before it."""
    return _MARK.format(runtime) + "\n" + text


def marked_runtime(text: str) -> str | None:
    """The runtime named by the mark before the ``<algo>`` element of ``text``, if a known one."""
    head = text[:_HEAD_CHARS].split("<algo", 1)[0]
    found = _MARK_RE.search(head)
    return found.group(1) if found and found.group(1) in PROFILES else None


def written_for(path: str, program: Program) -> str | None:
    """The runtime the file at ``path`` says it was written for (XML mark or JSON meta), or None."""
    if Path(path).suffix in (".json", ".gz"):
        lowering = program.meta.get("lowering") if isinstance(program.meta, Mapping) else None
        runtime = lowering.get("runtime") if isinstance(lowering, Mapping) else None
        return runtime if runtime in PROFILES else None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return marked_runtime(handle.read(_HEAD_CHARS))
    except OSError:
        return None
