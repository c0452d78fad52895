"""Load and save the on-disk formats; schedules are verified on load.

Writes are atomic (temp file in the same folder, then rename) so that a failure never leaves a
half-written file behind. A path ending in ``.gz`` is read and written gzip-compressed at level 6 (big
schedules: a 128-GPU allgather is 7 MB of JSON, 0.4 MB compressed); the compression is
deterministic (no timestamp), so committed files only change when their content does.

Reading is strict, in one place (``parse_json``): NaN, Infinity, numbers that overflow a float,
integers of more than MAX_INT_DIGITS digits and nesting deeper than MAX_DEPTH are refused with
one line naming the file and the field, before any reader looks at the document.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Any, Callable, Mapping

from synth.core.errors import InputError
from synth.core.schedule import Schedule
from synth.core.topology import Topology

MAX_DEPTH = 64  # nesting a document may have; synth's own formats need about 6
MAX_INT_DIGITS = 19  # integers must fit 64 bits (unsigned); longer ones are refused


def read_bytes(path: str | Path) -> bytes:
    """A file's bytes; a missing file, a folder or an unreadable file is one InputError line."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None


def read_json(path: str | Path, wide_ints: bool = False) -> Any:
    """Parse a JSON file (gzip-compressed when the name ends in .gz); any failure is one
    InputError line naming the file. ``wide_ints``: integers up to 2^64 - 1 (20 digits), for
    formats of other tools that write that limit (MSCCL++ plans' max_message_size)."""
    path = Path(path)
    data = read_bytes(path)
    try:
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        text = data.decode("utf-8")
    except (gzip.BadGzipFile, EOFError, zlib.error):
        raise InputError(f"{path}: not a gzip file (the name ends in .gz)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    return parse_json(text, str(path), wide_ints)


def parse_json(text: str, where: str, wide_ints: bool = False) -> Any:
    """Parse strict JSON text: no NaN or Infinity, only finite numbers, integers of at most
    MAX_INT_DIGITS digits, at most MAX_DEPTH levels of nesting. Any problem is one InputError line
    starting with ``where`` and naming the field.

    >>> parse_json('{"a": [1, 2.5]}', "x.json")
    {'a': [1, 2.5]}
    >>> parse_json('{"links": [{"bandwidth": NaN}]}', "x.json")
    Traceback (most recent call last):
    synth.core.errors.InputError: x.json: links[0].bandwidth: NaN is not a number JSON allows (need a finite number)
    """
    bad: list[_BadNumber] = []
    try:
        doc = json.loads(text, parse_float=partial(_parse_float, bad), parse_constant=partial(_parse_constant, bad))
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except ValueError:  # Python refuses to convert integers of thousands of digits
        raise InputError(f"{where}: an integer has far too many digits (at most {MAX_INT_DIGITS})") from None
    except RecursionError:
        raise InputError(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    limit = _WIDE_LIMIT if wide_ints else _INT_LIMIT
    problem = _shape_problem(doc, limit)
    if problem == "depth":
        raise InputError(f"{where}: nested too deeply (at most {MAX_DEPTH} levels)")
    if problem == "integer":
        at, value = _find(doc, partial(_too_big, limit=limit))
        most = "2^64 - 1" if wide_ints else f"{MAX_INT_DIGITS} digits"
        raise InputError(f"{where}: {at + ': ' if at else ''}integer of {len(str(abs(value)))} digits is too "
                         f"large (at most {most})")
    if bad:
        at, _ = _find(doc, lambda value: value is bad[0])
        raise InputError(f"{where}: {at + ': ' if at else ''}{bad[0].problem}")
    return doc


_INT_LIMIT = 10 ** MAX_INT_DIGITS
_WIDE_LIMIT = 2**64  # exclusive: the largest unsigned 64-bit integer is allowed


@dataclass(frozen=True, eq=False)
class _BadNumber:
    """Stands in, while parsing, for a number synth refuses; ``problem`` says why."""

    problem: str


def _parse_float(bad: list, text: str) -> Any:
    value = float(text)
    if math.isfinite(value):
        return value
    shown = text if len(text) <= 24 else text[:21] + "..."
    bad.append(_BadNumber(f"{shown} is too large for a number (need a finite number)"))
    return bad[-1]


def _parse_constant(bad: list, text: str) -> Any:
    bad.append(_BadNumber(f"{text} is not a number JSON allows (need a finite number)"))
    return bad[-1]


def _too_big(value: Any, limit: int = _INT_LIMIT) -> bool:
    return type(value) is int and not -limit < value < limit


def _shape_problem(doc: Any, limit: int = _INT_LIMIT) -> str | None:
    """Why ``doc`` is refused: "depth" (containers nest deeper than MAX_DEPTH), "integer" (an
    integer too large), or None. One level at a time, without recursion (fast on big schedules)."""
    level, depth = [doc] if type(doc) is dict or type(doc) is list else [], 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            return "depth"
        values = list(chain.from_iterable(node.values() if type(node) is dict else node for node in level))
        level = [v for v in values if type(v) is dict or type(v) is list]
        ints = [v for v in values if type(v) is int]
        if ints and (max(ints) >= limit or min(ints) <= -limit):
            return "integer"
    return "integer" if _too_big(doc, limit) else None


def _find(doc: Any, wanted) -> tuple[str, Any]:
    """(JSON path such as ``links[0].bandwidth``, value) of the first value for which ``wanted`` holds."""
    stack: list[tuple[Any, str]] = [(doc, "")]
    while stack:
        node, path = stack.pop()
        if wanted(node):
            return path, node
        if type(node) is dict:
            stack += [(v, f"{path}.{k}" if path else str(k)) for k, v in reversed(node.items())]
        elif type(node) is list:
            stack += [(v, f"{path}[{i}]") for i, v in reversed(list(enumerate(node)))]
    return "", None


def dumps(doc: Any) -> str:
    """``json.dumps(doc, indent=1)`` plus a newline; a schedule's steps (millions of sends at
    scale) and its collective's ``pre`` and ``post`` (a rank list per chunk: 45M ranks for an
    allreduce over 1440 GPUs) are written from templates, byte for byte what the json module
    would write."""
    if not isinstance(doc, dict):
        return json.dumps(doc, indent=1) + "\n"
    parts: dict[str, str] = {}  # marker -> its text
    steps = doc.get("steps")
    if isinstance(steps, list) and steps and all(_plain_step(s) for s in steps):
        parts["\u0000steps\u0000"] = _steps_text(steps)
        doc = {**doc, "steps": "\u0000steps\u0000"}
    coll = doc.get("collective")
    if isinstance(coll, dict):
        lists = {key: coll[key] for key in ("pre", "post") if _int_lists(coll.get(key))}
        for key, value in lists.items():
            parts[f"\u0000{key}\u0000"] = _int_lists_text(value)
        if lists:
            doc = {**doc, "collective": {**coll, **{key: f"\u0000{key}\u0000" for key in lists}}}
    text = json.dumps(doc, indent=1)
    for marker, part in parts.items():
        text = text.replace(json.dumps(marker), part, 1)
    return text + "\n"


def _int_lists(value: Any) -> bool:
    return type(value) is list and bool(value) and all(_int_list(v) for v in value)


def _int_lists_text(lists: list) -> str:
    """A list of integer lists as json.dumps(indent=1) writes it as a field of an object at depth
    1 of a document (identical lists written once)."""
    written: dict[tuple, str] = {}
    out = []
    for values in lists:
        key = tuple(values)
        text = written.get(key)
        if text is None:
            text = written[key] = "[\n    " + ",\n    ".join(map(str, values)) + "\n   ]" if values else "[]"
        out.append(text)
    return "[\n   " + ",\n   ".join(out) + "\n  ]"


_SEND_KEYS = ("chunk", "src", "dst", "op")
_SEND = '\n    {\n     "chunk": %d,\n     "src": %d,\n     "dst": %d,\n     "op": %s\n    }'


def _plain_step(step: Any) -> bool:
    return (isinstance(step, dict) and tuple(step) in (("rounds", "sends"), ("sends",))
            and isinstance(step["sends"], list) and type(step.get("rounds", 0)) is int)


def _steps_text(steps: list) -> str:
    """The steps list as json.dumps(indent=1) writes it at depth 1 of a document."""
    parts = []
    for step in steps:
        head = "{"
        if "rounds" in step:
            head += f'\n   "rounds": {step["rounds"]},'
        sends = step["sends"]
        if not sends:
            body = "[]"
        elif all(_plain_send(x) or _plain_entry(x) for x in sends):
            strings = {text: json.dumps(text) for text in {x["switch" if "switch" in x else "op"] for x in sends}}
            body = "[" + ",".join(_entry_text(x, strings) if "switch" in x else
                                  _SEND % (x["chunk"], x["src"], x["dst"], strings[x["op"]]) for x in sends) + "\n   ]"
        else:
            body = json.dumps(sends, indent=1).replace("\n", "\n   ")
        parts.append(f'{head}\n   "sends": {body}\n  }}')
    return "[\n  " + ",\n  ".join(parts) + "\n ]"


_ENTRY_KEYS = ("op", "switch", "chunk", "srcs", "dsts")
_ENTRY = ('\n    {\n     "op": "switch",\n     "switch": %s,\n     "chunk": %d,\n     "srcs": %s,\n'
          '     "dsts": %s\n    }')


def _plain_send(x: Any) -> bool:
    return (type(x) is dict and tuple(x) == _SEND_KEYS and type(x["chunk"]) is int and type(x["src"]) is int
            and type(x["dst"]) is int and type(x["op"]) is str)


def _plain_entry(x: Any) -> bool:
    """A switch entry as ``Schedule.to_dict`` writes it (its rank lists written from a template)."""
    return (type(x) is dict and tuple(x) == _ENTRY_KEYS and x["op"] == "switch" and type(x["switch"]) is str
            and type(x["chunk"]) is int and _int_list(x["srcs"]) and _int_list(x["dsts"]))


def _int_list(value: Any) -> bool:
    return type(value) is list and all(type(v) is int for v in value)


def _entry_text(x: dict, strings: dict) -> str:
    def ranks(values: list) -> str:
        return "[\n      " + ",\n      ".join(map(str, values)) + "\n     ]" if values else "[]"

    return _ENTRY % (strings[x["switch"]], x["chunk"], ranks(x["srcs"]), ranks(x["dsts"]))


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file and rename; never leaves a partial file."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        if path.suffix == ".gz":
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0,
                                                          compresslevel=6) as handle:
                handle.write(text.encode("utf-8"))
        else:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: str | Path, doc: Any) -> None:
    write_text_atomic(path, dumps(doc))


def folder_problem(folder: str | Path, replaceable: Callable[[str], bool]) -> str | None:
    """Why ``write_folder_atomic`` would refuse ``folder``, or None: it is missing, empty, or holds
    only plain files whose names ``replaceable`` accepts (files an earlier run wrote)."""
    folder = Path(folder)
    if folder.is_symlink():
        return "is a symbolic link; name a folder"
    if not folder.exists():
        return None
    if not folder.is_dir():
        return "exists and is not a folder"
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        return f"cannot read folder: {exc.strerror or exc}"
    foreign = [e.name for e in entries if e.is_symlink() or not e.is_file() or not replaceable(e.name)]
    if foreign:
        return (f"folder is not empty and holds {foreign[0]!r}, which this command did not write; "
                "name a new or empty folder")
    return None


def write_folder_atomic(folder: str | Path, files: Mapping[str, str],
                        replaceable: Callable[[str], bool] = lambda name: False) -> None:
    """Make ``folder`` hold exactly ``files`` (name -> text): all are written into a temp folder
    beside it, which then takes its name in one rename, so a failure leaves nothing behind. A
    ``folder`` holding files an earlier run wrote (``replaceable``) is replaced whole; one holding
    anything else is refused (see ``folder_problem``) before anything is written."""
    folder = Path(folder)
    problem = folder_problem(folder, replaceable)
    if problem:
        raise InputError(f"{folder}: {problem}")
    parent = folder.parent if str(folder.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".tmp", dir=parent))
    except OSError as exc:
        raise InputError(f"{folder}: cannot create folder: {exc.strerror or exc}") from None
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o777 & ~mask)  # mkdtemp makes it private; the result is an ordinary folder
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        _swap_in(tmp, folder)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):
            raise InputError(f"{folder}: cannot write: {exc.strerror or exc}") from None
        raise


def _swap_in(new: Path, folder: Path) -> None:
    """Rename ``new`` to ``folder``; a non-empty ``folder`` is moved aside first and removed after."""
    if not (folder.is_dir() and any(folder.iterdir())):
        os.replace(new, folder)  # a new name, or onto an empty folder
        return
    old = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", suffix=".old", dir=new.parent))
    try:
        os.replace(folder, old)
    except BaseException:
        old.rmdir()
        raise
    try:
        os.replace(new, folder)
    except BaseException:
        os.replace(old, folder)
        raise
    shutil.rmtree(old, ignore_errors=True)


def load_topology_file(path: str | Path) -> Topology:
    return Topology.from_dict(read_json(path), where=str(path))


def save_schedule(path: str | Path, schedule: Schedule) -> None:
    write_json_atomic(path, schedule.to_dict())


def schedule_file_name(collective: str, topology: str, steps: int, rounds: int | None, chunks: int) -> str:
    """Stable file name derived from the problem, e.g. ``allgather.dgx1.s3-r7-c6.schedule.json``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in topology)
    return f"{collective}.{safe}.s{steps}-r{rounds}-c{chunks}.schedule.json"


def certificate_file_name(collective: str, steps: int, rounds: int, chunks: int, direct: bool = False) -> str:
    """Where a pareto folder keeps a budget's certificate of infeasibility, e.g.
    ``certificates/allgather.s2-r3-c1.json`` (``synth.smt.proof_files``)."""
    kind = ".direct" if direct else ""
    return f"certificates/{collective}{kind}.s{steps}-r{rounds}-c{chunks}.json"


def write_frontier(folder: str | Path, frontier) -> Path:
    """Write one schedule file per frontier point and ``frontier.json`` (each atomically). An
    attempt with a certificate of infeasibility names its file (written by
    ``synth.smt.proof_files.write_certificates``)."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{folder}: cannot create folder: {exc.strerror or exc}") from None
    points = []
    for point in frontier.points:
        name = schedule_file_name(frontier.collective, frontier.topology.name, point.steps, point.rounds, point.chunks)
        save_schedule(folder / name, point.schedule)
        points.append({
            "steps": point.steps,
            "rounds": point.rounds,
            "chunks": point.chunks,
            "schedule": name,
            "solve_seconds": round(point.solve_seconds, 4),
        })
    doc = {
        "topology": frontier.topology.name,
        "collective": frontier.collective,
        "complete": frontier.complete,
        "bounds": frontier.bounds,
        "points": points,
        "attempts": [_attempt_entry(a) for a in frontier.attempts],
    }
    if frontier.note:
        doc["note"] = frontier.note
    path = folder / "frontier.json"
    write_json_atomic(path, doc)
    return path


def _attempt_entry(attempt) -> dict:
    """An attempt as frontier.json lists it (with its certificate's file, when it has one)."""
    entry = {"steps": attempt.steps, "rounds": attempt.rounds, "chunks": attempt.chunks,
             "status": attempt.status.value, "seconds": round(attempt.seconds, 4)}
    certificate = getattr(attempt, "certificate", None)
    if certificate is not None:
        entry["certificate"] = certificate_file_name(certificate.collective, certificate.steps, certificate.rounds,
                                                     certificate.chunks, certificate.direct)
    return entry
