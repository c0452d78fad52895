"""Read ``nvidia-smi topo -m`` output, as people paste it, into the importers' IR.

The matrix has a header line (GPU0..GPUn-1, the NIC columns, then affinity columns such as
``CPU Affinity``, ``NUMA Affinity``, ``GPU NUMA ID``), one row per GPU and one per NIC, then an
optional ``Legend:`` and ``NIC Legend:`` (``NIC0: mlx5_0``). Cells are separated by tabs or, where
the paste lost them, by runs of two or more spaces. The GPU rows are authoritative: NIC rows are
only compared with them (a disagreement becomes a note, not an error).

Some drivers print a GPU row's last link cell and its CPU Affinity with no separator
(``PHB0-115``, ``X0-15``, ``NV120-63``). When the header has affinity columns and that cell is not
a path type by itself, it is read as a path type followed by the affinity. ``NV#`` followed by
digits can split more than one way (``NV120-63``: NV1 + 20-63 or NV12 + 0-63); the transposed
cell, which the matrix's symmetry makes equal, picks the reading, and a cell still ambiguous is
refused in one line. A cell that is a path type by itself (``NV120``) is split only when another
row's cell shows the output runs cells together and the transposed cell agrees with the split.

>>> text = ("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\n"
...         "GPU0\\t X \\tNV4\\t0-23\\t0\\nGPU1\\tNV4\\t X \\t0-23\\t0\\n")
>>> m = read_nvidia_smi(text, "topo.txt")
>>> m.gpus, m.path(0, 1).links, m.numa, m.notes
(2, 4, (0, 0), ('nvidia-smi topo -m: 2 GPUs, 0 NICs',))
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from synth.core.errors import InputError
from synth.importers.machine import PCIE_LEVELS, GpuPath, MachineDescription, Nic

_ANSI = re.compile(r"\x1b?\[[0-9;]*m")
_SPACED_CELL = re.compile(r"\S+(?: \S+)*")  # cells of a space-aligned line: 2+ spaces between them
_GPU = re.compile(r"GPU(0|[1-9][0-9]{0,4})")
_NV = re.compile(r"NV([1-9][0-9]{0,5})")
_NIC_LEGEND = re.compile(r"\s*(NIC[0-9]+)\s*:(.*\S)")
_FIRST_INT = re.compile(r"\s*([0-9]{1,9})(?![0-9])")
_TRAILING = re.compile(r"affinity|numa", re.IGNORECASE)
_NOT_A_MATRIX = "not an nvidia-smi topo -m matrix (no GPU0 column header)"
_AFFINITY = re.compile(r"[0-9][0-9,-]*|N/A")  # a CPU Affinity value as printed after a link cell
_SELF_JOINED = re.compile(r"X(?:[0-9][0-9,-]*|N/A)")  # the diagonal X run into the affinity


@dataclass(frozen=True)
class _Header:
    gpus: int
    nics: tuple[str, ...]  # NIC column names as printed
    extra: tuple[str, ...]  # the affinity columns after them
    extra_at: tuple[int, ...]  # where each affinity column starts (tabs expanded)

    def columns(self) -> str:
        """The link/NIC columns in words, e.g. ``GPU0..GPU7, NIC0..NIC3``."""
        spans = [f"GPU0..GPU{self.gpus - 1}" if self.gpus > 1 else "GPU0"]
        if self.nics:
            spans.append(f"{self.nics[0]}..{self.nics[-1]}" if len(self.nics) > 1 else self.nics[0])
        return ", ".join(spans)


def _split(line: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The cells of one line and, for a space-aligned line, the column each cell starts at."""
    if "\t" in line:
        return tuple(cell.strip() for cell in line.split("\t")), ()
    found = list(_SPACED_CELL.finditer(line))
    return tuple(m.group() for m in found), tuple(m.start() for m in found)


def _is_header(cells: tuple[str, ...]) -> bool:
    named = [cell for cell in cells if cell]
    return bool(named) and named[0] == "GPU0" and not _has_self(tuple(named))


def _clean_lines(text: str) -> list[str]:
    return [_ANSI.sub("", line) for line in text.splitlines()]


def _has_self(cells: tuple[str, ...]) -> bool:
    """The row holds the diagonal X (alone, or run into the affinity: ``X0-15``)."""
    return any(cell == "X" or _SELF_JOINED.fullmatch(cell) for cell in cells)


def _find_header(lines: list[str]) -> int | None:
    """The header line: the last GPU0 column header before the first GPU row (one with an X)."""
    header = None
    for k, line in enumerate(lines):
        cells = _split(line)[0]
        if _is_header(cells):
            header = k
        elif header is not None and _GPU.fullmatch(cells[0] if cells else "") and _has_self(cells):
            return header
    return None


def looks_like(text: str) -> bool:
    """True when ``text`` holds a topo matrix: a GPU0 column header, then GPU rows."""
    return "GPU0" in text and _find_header(_clean_lines(text)) is not None


def _header(line: str, where: str) -> _Header:
    names = [cell for cell in _split(line)[0] if cell]
    gpus = 0
    while gpus < len(names) and names[gpus] == f"GPU{gpus}":
        gpus += 1
    rest = names[gpus:]
    cut = next((k for k, name in enumerate(rest) if _TRAILING.search(name)), len(rest))
    for name in rest[:cut]:
        if _GPU.fullmatch(name):
            raise InputError(f"{where}: header: column {name} is out of order (expected GPU{gpus} or a NIC)")
    expanded, at, pos = line.expandtabs(), [], 0
    for name in names:
        found = expanded.find(name, pos)
        pos = found if found >= 0 else pos
        at.append(pos)
        pos += len(name)
    return _Header(gpus, tuple(rest[:cut]), tuple(rest[cut:]), tuple(at[gpus + cut:]))


def _rows(lines: list[str], header: _Header, where: str):
    """GPU rows {k: (cells, starts)} and NIC rows {nic index: cells}, from the lines after the header."""
    gpu_rows: dict[int, tuple[tuple[str, ...], tuple[int, ...]]] = {}
    nic_rows: dict[int, tuple[str, ...]] = {}
    nic_index = {name: k for k, name in reversed(list(enumerate(header.nics)))}
    for line in lines:
        cells, starts = _split(line)
        if not any(cells):
            continue
        if _is_header(cells):
            break
        gpu = _GPU.fullmatch(cells[0])
        if gpu:
            k = int(gpu.group(1))
            if k >= header.gpus:
                raise InputError(f"{where}: row {cells[0]}: the header has no such column ({header.columns()})")
            if k in gpu_rows:
                raise InputError(f"{where}: row {cells[0]} appears twice")
            gpu_rows[k] = (cells, starts)
        elif cells[0] in nic_index:
            nic_rows.setdefault(nic_index[cells[0]], cells)
        else:
            break
    return gpu_rows, nic_rows


def _show(cell: str) -> str:
    return repr(cell if len(cell) <= 24 else cell[:24] + "...")


def _is_code(cell: str) -> bool:
    """A link/NIC cell rather than an affinity value (digits, commas, dashes, N/A or nothing)."""
    return cell != "N/A" and re.search(r"[A-Za-z]", cell) is not None


def _level(cell: str) -> str:
    return "SYS" if cell == "SOC" else cell  # old drivers print SOC for SYS


def _code(cell: str, at: str, diagonal: bool, nic: bool, where: str) -> str:
    """The cell's path type (SOC read as SYS), checked."""
    if diagonal:
        if cell != "X":
            raise InputError(f"{where}: {at}: the diagonal cell is {_show(cell)}, expected X")
        return "X"
    code = _level(cell)
    if code in PCIE_LEVELS or (not nic and _NV.fullmatch(code)):
        return code
    if cell == "X":
        raise InputError(f"{where}: {at}: 'X' (self) off the diagonal")
    if nic:
        raise InputError(f"{where}: {at}: {_show(cell)} is not a PCIe path type (PIX, PXB, PHB, NODE, SYS)")
    raise InputError(f"{where}: {at}: unknown link code {_show(cell)}")


def _is_path_type(code: str, diagonal: bool, nic: bool) -> bool:
    if diagonal:
        return code == "X"
    return _level(code) in PCIE_LEVELS or (not nic and _NV.fullmatch(code) is not None)


def _readings(cell: str, diagonal: bool, nic: bool) -> list[tuple[str, str]]:
    """The ways to read ``cell`` as (path type, CPU affinity run into it); ("PHB", "") for a plain cell."""
    out = []
    for cut in range(1, len(cell) + 1):
        code, rest = cell[:cut], cell[cut:]
        if _is_path_type(code, diagonal, nic) and (not rest or _AFFINITY.fullmatch(rest)):
            out.append((code, rest))
    return out


def _transposed(rows: dict, k: int, c: int, header: _Header) -> str | None:
    """The cell that symmetry makes equal to row GPU<k>, column c (None for NIC columns)."""
    if c == k or c >= header.gpus or c not in rows or len(rows[c][0]) <= 1 + k:
        return None
    return rows[c][0][1 + k]


def _last_cell(k: int, rows: dict, header: _Header) -> str | None:
    """Row GPU<k>'s last link/NIC cell when an affinity column could have run into it, else None."""
    cells = rows[k][0]
    width = header.gpus + len(header.nics)
    if not header.extra or len(cells) <= width or not cells[width]:
        return None
    return cells[width]


def _plainly_joined(k: int, rows: dict, header: _Header) -> bool:
    """Row GPU<k>'s last link cell is no path type by itself but a path type followed by an affinity."""
    cell, c = _last_cell(k, rows, header), header.gpus + len(header.nics) - 1
    if cell is None:
        return False
    readings = _readings(cell, c == k, c >= header.gpus)
    return bool(readings) and (cell, "") not in readings


def _unjoin_row(k: int, rows: dict, header: _Header, joined: bool, where: str):
    """Row GPU<k> with its last link cell split from the CPU affinity run into it (unchanged when
    there is nothing to split). A cell that is a path type by itself is split only when ``joined``
    (some row's cell can only be read as run together) and the transposed cell disagrees with it
    but agrees with one split."""
    cells, starts = rows[k]
    cell = _last_cell(k, rows, header)
    if cell is None:
        return cells, starts
    width = header.gpus + len(header.nics)
    c = width - 1
    readings = _readings(cell, c == k, c >= header.gpus)
    other = _transposed(rows, k, c, header)
    agreeing = [r for r in readings if other is not None and _level(r[0]) == _level(other)]
    if (cell, "") in readings:
        if not joined or not agreeing or (cell, "") in agreeing:
            return cells, starts
        chosen = agreeing
    else:
        chosen = agreeing or readings
    if len(chosen) != 1:
        if len(chosen) > 1:
            options = " or ".join(f"{code} + {rest}" for code, rest in chosen)
            name = f"GPU{c}" if c < header.gpus else header.nics[c - header.gpus]
            raise InputError(f"{where}: row GPU{k}, column {name}: {_show(cell)} runs a link code into the CPU "
                             f"affinity and reads as {options}; the transposed cell does not settle it")
        return cells, starts  # no reading: _code names the cell
    code, rest = chosen[0]
    cells = cells[:width] + (code, rest) + cells[width + 1:]
    if starts:
        starts = starts[:width + 1] + (starts[width] + len(code),) + starts[width + 1:]
    return cells, starts


def _gpu_codes(k: int, cells: tuple[str, ...], header: _Header, where: str) -> tuple[str, ...]:
    """Row GPU<k>'s link and NIC cells as path types."""
    width = header.gpus + len(header.nics)
    present = sum(1 for cell in cells[1:] if _is_code(cell))
    if present < width:
        raise InputError(f"{where}: row GPU{k}: {present} cells where the header has {width} columns "
                         f"({header.columns()})")
    names = [f"GPU{j}" for j in range(header.gpus)] + list(header.nics)
    return tuple(_code(cells[1 + c], f"row GPU{k}, column {name}", c == k, c >= header.gpus, where)
                 for c, name in enumerate(names))


def _pairs(codes: list[tuple[str, ...]], where: str) -> dict[tuple[int, int], GpuPath]:
    pairs = {}
    for i in range(len(codes)):
        for j in range(i + 1, len(codes)):
            a, b = codes[i][j], codes[j][i]
            if a != b:
                raise InputError(f"{where}: rows GPU{i}/GPU{j}: asymmetric entry: "
                                 f"GPU{i}->GPU{j} is {a} but GPU{j}->GPU{i} is {b}")
            at, nv = f"row GPU{i}, column GPU{j}", _NV.fullmatch(a)
            pairs[(i, j)] = (GpuPath("nvlink", links=int(nv.group(1)), where=at) if nv
                             else GpuPath("pcie", level=a, where=at))
    return pairs


def _extras(cells: tuple[str, ...], starts: tuple[int, ...], header: _Header) -> dict[str, str]:
    """A GPU row's affinity cells by column name. A space-aligned row that lost empty cells is
    matched to the header by where each cell starts."""
    first = 1 + header.gpus + len(header.nics)
    values, at = cells[first:], starts[first:]
    if not at or len(values) >= len(header.extra) or not header.extra:
        return dict(zip(header.extra, values))
    near = [min(range(len(header.extra)), key=lambda c: abs(header.extra_at[c] - s)) for s in at]
    return {header.extra[c]: value for c, value in zip(near, values)}


def _numa(extras: list[dict[str, str]], header: _Header) -> tuple[tuple[int | None, ...], tuple[str, ...]]:
    """Per GPU its NUMA node (NUMA Affinity, else numbered distinct CPU Affinity), and a note."""
    by_key = {" ".join(name.lower().split()): name for name in header.extra}
    if "numa affinity" in by_key:
        cells = [row.get(by_key["numa affinity"], "") for row in extras]
        return tuple(int(m.group(1)) if (m := _FIRST_INT.match(c)) else None for c in cells), ()
    if "cpu affinity" not in by_key:
        return (None,) * len(extras), ()
    cells = [row.get(by_key["cpu affinity"], "") for row in extras]
    ids: dict[str, int] = {}
    numa = tuple(ids.setdefault(c, len(ids)) if c else None for c in cells)
    return numa, ("nvidia-smi topo -m: no NUMA Affinity column; NUMA nodes numbered by distinct CPU Affinity",)


def _nic_note(nic_rows: dict[int, tuple[str, ...]], nics: tuple[Nic, ...], header: _Header) -> tuple[str, ...]:
    """A note when NIC rows contradict the GPU rows' NIC columns (the GPU rows are used)."""
    diffs = [(header.nics[k], j, cell, nics[k].levels[j]) for k, cells in sorted(nic_rows.items())
             for j, cell in enumerate(cells[1:header.gpus + 1])
             if _level(cell) in PCIE_LEVELS and _level(cell) != nics[k].levels[j]]
    if not diffs:
        return ()
    row, j, cell, level = diffs[0]
    note = (f"nvidia-smi topo -m: {len(diffs)} NIC row cells disagree with the GPU rows (first: row {row}, "
            f"column GPU{j} is {cell}, row GPU{j} says {level}); the GPU rows were used")
    return (note,)


def read_nvidia_smi(text: str, where: str) -> MachineDescription:
    """The machine an ``nvidia-smi topo -m`` output describes; ``where`` names it in errors."""
    lines = _clean_lines(text)
    start = _find_header(lines)
    if start is None:
        raise InputError(f"{where}: {_NOT_A_MATRIX}")
    header = _header(lines[start], where)
    gpu_rows, nic_rows = _rows(lines[start + 1:], header, where)
    n = header.gpus
    for k in range(n):
        if k not in gpu_rows:
            cut = "" if any(j > k for j in gpu_rows) else ": the matrix is cut off"
            raise InputError(f"{where}: row GPU{k} is missing{cut}")
    joined_somewhere = any(_plainly_joined(k, gpu_rows, header) for k in range(n))
    split = {k: _unjoin_row(k, gpu_rows, header, joined_somewhere, where) for k in range(n)}
    joined = [k for k in range(n) if len(split[k][0]) != len(gpu_rows[k][0])]
    gpu_rows = split
    codes = [_gpu_codes(k, gpu_rows[k][0], header, where) for k in range(n)]
    pairs = _pairs(codes, where)
    legend = {m.group(1): m.group(2).strip() for line in lines[start + 1:] if (m := _NIC_LEGEND.match(line))}
    nics = tuple(Nic(legend.get(name, name), tuple(codes[k][n + c] for k in range(n)), where=f"column {name}")
                 for c, name in enumerate(header.nics))
    numa, numa_note = _numa([_extras(*gpu_rows[k], header) for k in range(n)], header)
    summary = f"nvidia-smi topo -m: {n} GPU{'s' if n != 1 else ''}, {len(nics)} NIC{'s' if len(nics) != 1 else ''}"
    return MachineDescription("nvidia-smi", n, pairs, nics=nics, numa=numa,
                              notes=(summary,) + _joined_note(joined, gpu_rows, header) + numa_note
                              + _nic_note(nic_rows, nics, header))


def _joined_note(joined: list[int], gpu_rows: dict, header: _Header) -> tuple[str, ...]:
    """A note naming the rows whose last link cell ran into the CPU Affinity."""
    if not joined:
        return ()
    width = header.gpus + len(header.nics)
    k = joined[0]
    cell = gpu_rows[k][0][width] + gpu_rows[k][0][width + 1]
    return (f"nvidia-smi topo -m: {len(joined)} GPU row(s) print the last link cell and the CPU Affinity with no "
            f"separator (first: row GPU{k}, {cell!r}): read as {gpu_rows[k][0][width]} + {gpu_rows[k][0][width + 1]}",)
