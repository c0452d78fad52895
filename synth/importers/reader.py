"""Read a tool's output file into a synth.topology: pick the reader, build, compose ``--nodes``.

``FORMATS``: nvidia-smi (``nvidia-smi topo -m``), nccl-xml (NCCL_TOPO_DUMP_FILE, RCCL dumps,
NCCL_TOPO_FILE), rocm-smi (``rocm-smi --showtopo``); ``auto`` recognises them by content.

>>> text = "\\tGPU0\\tGPU1\\nGPU0\\t X \\tNV4\\nGPU1\\tNV4\\t X \\n"
>>> topo = import_text(text, "pair.txt", gpu="rtx3090")
>>> topo.ranks, topo.link(0, 1).bandwidth, topo.link(0, 1).kind
(2, 56.25, 'nvlink')
"""

from __future__ import annotations

import re
from pathlib import Path

from synth.core.errors import InputError
from synth.core.topology import Topology

FORMATS = ("auto", "nvidia-smi", "nccl-xml", "rocm-smi")
MAX_BYTES = 16 << 20  # a topology dump is kilobytes; refuse absurd files before reading them whole


def _readers():
    from synth.importers import nccl_xml, nvidia_smi, rocm_smi

    return {"nvidia-smi": (nvidia_smi.looks_like, nvidia_smi.read_nvidia_smi),
            "nccl-xml": (nccl_xml.looks_like, nccl_xml.read_nccl_xml),
            "rocm-smi": (rocm_smi.looks_like, rocm_smi.read_rocm_smi)}


def sniff(text: str) -> str | None:
    """The format ``text`` is in, or None."""
    for name, (looks_like, _) in _readers().items():
        if looks_like(text):
            return name
    return None


def read_text_file(path: str | Path) -> str:
    """A tool's output as text (UTF-8, else Latin-1; a UTF-8 BOM dropped); InputError if unreadable."""
    from synth.core.io import read_bytes

    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError:
        size = 0
    if size > MAX_BYTES:
        raise InputError(f"{path}: {size} bytes is not a topology tool's output (at most {MAX_BYTES})")
    data = read_bytes(path)
    if b"\x00" in data:
        raise InputError(f"{path}: a binary file, not a topology tool's output")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return text.lstrip("\ufeff")


def import_text(text: str, where: str, fmt: str = "auto", gpu: str | None = None, nic_gbps: float | None = None,
                nodes: int = 1, name: str | None = None, cpu: str | None = None,
                nvlink: str | None = None, nvls: str | None = None) -> Topology:
    """The synth.topology the tool output ``text`` describes (``nodes`` > 1: that many copies joined
    through their NICs, as ``NAMExK``, each keeping its switch). ``nvlink`` (switch, none): for NCCL
    topology files that list GPUs by PCI class only, whether the GPUs sit on an NVSwitch or have no
    NVLink. ``nvls`` (on, off; None: Hopper or newer on an NVSwitch): whether the NVSwitch reduces
    and multicasts (synth.importers.build.nvls_switch)."""
    from synth.importers.build import build_topology

    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    found = sniff(text) if fmt == "auto" else fmt
    if found is None:
        raise InputError(f"{where}: not nvidia-smi topo -m, NCCL topology XML or rocm-smi --showtopo output "
                         "(give --format if it is one of them)")
    desc = _readers()[found][1](text, where)
    base = name or _name_of(where)
    topo = build_topology(desc, base, where, gpu=gpu, nic_gbps=nic_gbps, cpu=cpu, nvlink=nvlink, nvls=nvls)
    if nodes != 1:
        from synth.core.compose import compose_machines

        if not topo.nics:
            raise InputError(f"{where}: --nodes {nodes} joins copies through their NICs, and the file shows no NIC "
                             "near a GPU")
        topo = compose_machines(topo, nodes)
    return topo


def import_file(path: str, **options) -> Topology:
    return import_text(read_text_file(path), str(path), **options)


def _name_of(where: str) -> str:
    stem = Path(where).name
    for suffix in (".txt", ".xml", ".log", ".out"):
        stem = stem.removesuffix(suffix)
    clean = re.sub(r"[^A-Za-z0-9_.-]", "-", stem).strip("-.") or "imported"
    return clean[:60]
