"""Load and save the on-disk formats; schedules are verified on load.

Writes are atomic (temp file in the same folder, then rename) so that a failure never leaves a
half-written file behind. A path ending in ``.gz`` is read and written gzip-compressed (big
schedules: a 128-GPU allgather is 7 MB of JSON, 0.4 MB compressed); the compression is
deterministic (no timestamp), so committed files only change when their content does.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from synth.core.errors import InputError, InvalidScheduleError
from synth.core.schedule import Schedule
from synth.core.topology import Topology


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; any failure is one InputError line naming the file."""
    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                text = handle.read()
        else:
            text = path.read_text(encoding="utf-8")
    except (gzip.BadGzipFile, EOFError):
        raise InputError(f"{path}: not a gzip file (the name ends in .gz)") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a file") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a UTF-8 text file") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None


def dumps(doc: Any) -> str:
    return json.dumps(doc, indent=1) + "\n"


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file and rename; never leaves a partial file."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(f"{path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    try:
        if path.suffix == ".gz":
            with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename="", mtime=0) as handle:
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


def load_topology_file(path: str | Path) -> Topology:
    return Topology.from_dict(read_json(path), where=str(path))


def load_schedule(path: str | Path, check: bool = True) -> Schedule:
    """Read a synth.schedule v1 file; with ``check`` raise InvalidScheduleError if it is invalid."""
    schedule = Schedule.from_dict(read_json(path), where=str(path))
    if check:
        from synth.verify import verify

        violations = verify(schedule)
        if violations:
            raise InvalidScheduleError(
                f"{path}: invalid schedule, {len(violations)} violation(s); first: {violations[0]}",
                violations,
            )
    return schedule


def save_schedule(path: str | Path, schedule: Schedule) -> None:
    write_json_atomic(path, schedule.to_dict())


def schedule_file_name(collective: str, topology: str, steps: int, rounds: int | None, chunks: int) -> str:
    """Stable file name derived from the problem, e.g. ``allgather.dgx1.s3-r7-c6.schedule.json``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in topology)
    return f"{collective}.{safe}.s{steps}-r{rounds}-c{chunks}.schedule.json"


def write_frontier(folder: str | Path, frontier) -> Path:
    """Write one schedule file per frontier point and ``frontier.json`` (each atomically)."""
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
        "attempts": [
            {"steps": a.steps, "rounds": a.rounds, "chunks": a.chunks, "status": a.status.value,
             "seconds": round(a.seconds, 4)}
            for a in frontier.attempts
        ],
    }
    if frontier.note:
        doc["note"] = frontier.note
    path = folder / "frontier.json"
    write_json_atomic(path, doc)
    return path
