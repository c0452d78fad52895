"""Read ``rocm-smi --showtopo`` output (as people paste it) into a MachineDescription.

The output is a run of sections, each opened by a ruler such as ``==== Link Type between two
GPUs ====`` (ruler widths follow the terminal), holding a GPU x GPU matrix or, for "Numa Nodes",
lines like ``GPU[0]  : (Topology) Numa Node: 0``. Used: "Link Type" (required: XGMI, PCIE, N/A;
0 or X on the diagonal), a link-count section ("count" / "Number of links" in its title), "Weight"
and "Hops" (recorded in ``where``) and "Numa Nodes". rocm-smi names no PCIe path finer than
"same NUMA node" (NODE) or "across nodes" (SYS), lists no NICs and no GPU model.

>>> text = '''==== Link Type between two GPUs ====
...        GPU0   GPU1
... GPU0   0      XGMI
... GPU1   XGMI   0
... '''
>>> read_rocm_smi(text, "t.txt").path(0, 1)
GpuPath(kind='xgmi', links=1, level=None, bandwidth=None, where='Link Type, row GPU0, column GPU1')
"""

from __future__ import annotations

import re

from synth.core.errors import InputError
from synth.importers.machine import GpuPath, MachineDescription

LINK_TYPE = "Link Type"
_RULER = re.compile(r"^\s*={3,}\s*(.*?)\s*=*\s*$")
_NUMA = re.compile(r"^\s*GPU\[(\d+)\]\s*:\s*\(Topology\)\s*Numa Node\s*:\s*(-?\d+|N/A)\s*$",
                   re.ASCII | re.IGNORECASE)
_DIAGONAL = ("0", "X", "N/A")
_KINDS = {"XGMI": "xgmi", "PCIE": "pcie", "N/A": None}


def looks_like(text: str) -> bool:
    """True when ``text`` reads as rocm-smi topology output."""
    return isinstance(text, str) and ("ROCm System Management Interface" in text
                                      or "Link Type between two GPUs" in text)


def _kind_of(title: str) -> str | None:
    """Which matrix a section title names (None: a section this reader ignores)."""
    low = title.lower()
    if "count" in low or "number of links" in low:
        return "Link count"
    for kind in (LINK_TYPE, "Weight", "Hops", "Numa"):
        if kind.lower() in low:
            return kind
    return None


def _sections(text: str, where: str) -> dict[str, list[str]]:
    """Section kind -> its lines (blank lines dropped); text before the first ruler is ignored."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        ruler = _RULER.match(line)
        if ruler:
            kind = _kind_of(ruler.group(1))
            if kind in found:
                raise InputError(f"{where}: two {kind!r} sections")
            current = found.setdefault(kind, []) if kind else None
        elif current is not None and line.strip():
            current.append(line)
    return found


def _matrix(kind: str, lines: list[str], where: str) -> list[list[str]]:
    """The cells of one matrix section, checked square with GPU0..GPUn-1 labels and a 0/X diagonal."""
    header = lines[0].split() if lines else []
    n = len(header)
    if not header or header != [f"GPU{k}" for k in range(n)]:
        raise InputError(f"{where}: {kind}: header should read 'GPU0 GPU1 ...', "
                         f"got {(lines[0].strip() if lines else '')[:40]!r}")
    rows: list[list[str]] = []
    for line in lines[1:]:
        cells = line.split()
        label = f"GPU{len(rows)}"
        if len(rows) == n:
            raise InputError(f"{where}: {kind}: line after the last row GPU{n - 1}: {line.strip()[:40]!r}")
        if cells[0] != label:
            raise InputError(f"{where}: {kind}: expected row {label}, got {line.strip()[:40]!r}")
        if len(cells) != n + 1:
            raise InputError(f"{where}: {kind}, row {label}: {len(cells) - 1} columns, expected {n}")
        if cells[1 + len(rows)].upper() not in _DIAGONAL:
            raise InputError(f"{where}: {kind}, row {label}, column {label}: diagonal should be "
                             f"0 or X, got {cells[1 + len(rows)][:20]!r}")
        rows.append(cells[1:])
    if len(rows) < n:
        raise InputError(f"{where}: {kind}: matrix stops after {len(rows)} of {n} rows "
                         f"(no row GPU{len(rows)})")
    return rows


def _cell(kind: str, i: int, j: int) -> str:
    return f"{kind}, row GPU{i}, column GPU{j}"


def _numbers(kind: str, rows: list[list[str]], where: str) -> list[list[int | None]]:
    """A numeric matrix (weight, hops, link count); N/A -> None."""
    out: list[list[int | None]] = []
    for i, row in enumerate(rows):
        out.append([])
        for j, value in enumerate(row):
            if i != j and not re.fullmatch(r"\d+|N/A", value, re.ASCII | re.IGNORECASE):
                raise InputError(f"{where}: {_cell(kind, i, j)}: expected a number, got {value[:20]!r}")
            out[i].append(int(value) if i != j and value.isdigit() else None)
    return out


def _symmetric(kind: str, rows: list, shown: list[list[str]], where: str) -> None:
    """Refuse a matrix whose (i, j) and (j, i) entries differ, naming both cells."""
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            if rows[i][j] != rows[j][i]:
                raise InputError(f"{where}: {_cell(kind, i, j)} is {shown[i][j][:20]!r} but "
                                 f"{_cell(kind, j, i)} is {shown[j][i][:20]!r}")


def _link_kinds(rows: list[list[str]], where: str) -> list[list[str | None]]:
    kinds: list[list[str | None]] = [[None] * len(rows) for _ in rows]
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            if i != j and value.upper() not in _KINDS:
                raise InputError(f"{where}: {_cell(LINK_TYPE, i, j)}: unknown link type {value[:20]!r}")
            kinds[i][j] = _KINDS.get(value.upper()) if i != j else None
    return kinds


def _numa(lines: list[str], gpus: int, where: str) -> tuple[int | None, ...]:
    """Per GPU its "Numa Node" (-1 or N/A -> None); "Numa Affinity" and other lines are skipped."""
    numa: list[int | None] = [None] * gpus
    for line in lines:
        match = _NUMA.match(line)
        if match and int(match.group(1)) >= gpus:
            raise InputError(f"{where}: Numa Nodes: GPU[{match.group(1)}] but the matrices have {gpus} GPUs")
        if match and match.group(2).lstrip("-").isdigit() and int(match.group(2)) >= 0:
            numa[int(match.group(1))] = int(match.group(2))
    return tuple(numa)


def _pcie_level(numa: tuple[int | None, ...], i: int, j: int) -> str | None:
    if numa[i] is None or numa[j] is None:
        return None
    return "NODE" if numa[i] == numa[j] else "SYS"


def _notes(gpus: int, pairs: dict[tuple[int, int], GpuPath]) -> str:
    total = gpus * (gpus - 1) // 2
    xgmi = sum(p.kind == "xgmi" for p in pairs.values())
    pcie = len(pairs) - xgmi
    if total and xgmi == total:
        shape = "XGMI all-to-all"
    elif total and pcie == total:
        shape = "PCIe only (no PCIe path finer than same/other NUMA node)"
    else:
        shape = f"{xgmi} XGMI pairs, {pcie} PCIe pairs, {total - len(pairs)} not reported"
    return f"rocm-smi --showtopo: {gpus} GPU{'s' * (gpus != 1)}, {shape}"


def read_rocm_smi(text: str, where: str) -> MachineDescription:
    """``rocm-smi --showtopo`` output -> MachineDescription (tool "rocm-smi"); InputError if malformed."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    sections = _sections(text if isinstance(text, str) else "", where)
    if LINK_TYPE not in sections:
        raise InputError(f"{where}: no 'Link Type between two GPUs' section: not rocm-smi --showtopo output")
    types = _matrix(LINK_TYPE, sections[LINK_TYPE], where)
    gpus = len(types)
    kinds = _link_kinds(types, where)
    _symmetric(LINK_TYPE, kinds, types, where)
    extra: dict[str, list[list[int | None]]] = {}
    for kind in ("Link count", "Weight", "Hops"):
        if kind in sections:
            rows = _matrix(kind, sections[kind], where)
            if len(rows) != gpus:
                raise InputError(f"{where}: {kind} has {len(rows)} GPUs but Link Type has {gpus}")
            extra[kind] = _numbers(kind, rows, where)
            if kind == "Link count":
                _symmetric(kind, extra[kind], rows, where)
    numa = _numa(sections.get("Numa", []), gpus, where)
    pairs: dict[tuple[int, int], GpuPath] = {}
    for i in range(gpus):
        for j in range(i + 1, gpus):
            if kinds[i][j] is None:
                continue
            said = [f"{k.lower()} {extra[k][i][j]}" for k in ("Weight", "Hops")
                    if k in extra and extra[k][i][j] is not None]
            place = _cell(LINK_TYPE, i, j) + (f" ({', '.join(said)})" if said else "")
            if kinds[i][j] == "pcie":
                pairs[(i, j)] = GpuPath("pcie", level=_pcie_level(numa, i, j), where=place)
                continue
            count = extra["Link count"][i][j] if "Link count" in extra else None
            if count == 0:
                raise InputError(f"{where}: {_cell('Link count', i, j)} is 0 but "
                                 f"{_cell(LINK_TYPE, i, j)} is XGMI")
            pairs[(i, j)] = GpuPath("xgmi", links=count or 1, where=place)
    return MachineDescription("rocm-smi", gpus, pairs, numa=numa, notes=(_notes(gpus, pairs),))
