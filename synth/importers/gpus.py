"""GPU models an importer needs to know: per-link NVLink/xGMI bandwidth, PCIe generation, NIC default,
and whether the GPU takes part in NVLink SHARP (NVLS) on an NVSwitch board (Hopper or newer).

``model(name)`` takes the names people type (``--gpu``: V100, a100, H200, rtx4090, "RTX 3090",
MI300X ..., any case, spaces/dashes ignored); ``from_device(text)`` takes what an NCCL/RCCL dump
names (PCI ``10de:2330``, ``gfx90a``, ``gcn:910``). Every figure says where it comes from: [R]
reference/hardware.md (with its own sources), [M] vendor specification from memory (to be
checked against the data sheet), as in hardware.md's own marking.

>>> model("H100").link_gbs, model("rtx 3090").link_gbs, model("mi250x").kind
(25.0, 14.0625, 'xgmi')
>>> from_device("10de:2330").name, from_device("gfx942").name
('H100', 'MI300X')
>>> model("h200").nvls, model("gb300").nvls, model("a100").nvls, model("mi300x").nvls
(True, True, False, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from synth.core.errors import InputError

# Usable bandwidth of a x16 link per direction, GB/s, by PCIe generation: line rate x lanes x
# encoding (8b/10b for gen 1-2, 128b/130b for gen 3-5, FLIT for gen 6) [M: PCI-SIG base specs].
PCIE_X16_GBS = {1: 4.0, 2: 8.0, 3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}
PCIE_SOURCE = ("PCIe bandwidth per direction: x16 = 15.75 GB/s gen3, 31.5 gen4, 63 gen5, 121 gen6, scaled by the "
               "link width (line rate x lanes x 128b/130b encoding; PCI-SIG base specifications, [M]); NCCL's own "
               "model uses 12 GB/s for gen3 x16 (topo.h PCI_BW)")


@dataclass(frozen=True)
class GpuModel:
    """``kind``: the scale-up link (nvlink, xgmi, or none); ``link_gbs``: per link per direction;
    ``links``: links per GPU on the usual board; ``pcie``: PCIe generation; ``nic_gbps``: the NIC
    speed such machines usually carry (used only when neither the file nor --nic-gbps says);
    ``nvls``: an NVIDIA GPU of Hopper (sm_90) or newer with NVLink, so that on an NVSwitch board
    the switch reduces and multicasts for it (``NVLS_SOURCE``)."""

    name: str
    kind: str
    link_gbs: float
    links: int
    pcie: int
    nic_gbps: float
    source: str
    nvls: bool = False

    @property
    def arch(self) -> str:
        """The architecture generation (``synth.core.topology.ARCHS``) this model belongs to."""
        return next(family.lower() for family, members in GENERATIONS if self.name in members)


def _m(name, kind, gbs, links, pcie, nic, source, nvls=False):
    return GpuModel(name, kind, gbs, links, pcie, nic, source, nvls)


# The Hopper+ flag (``nvls=True`` below): what makes an NVSwitch board an NVLS board.
NVLS_SOURCE = ("NVLS needs an NVSwitch node whose GPUs are all sm_90 (Hopper) or newer (NCCL src/graph/search.cc:1124 "
               "at v2.30.7; nvlsEfficiency is 0 for Volta and Ampere, tuning.cc:138-144; reference/in-network.md "
               "sections 5.1 and 6); HGX H100/H200/B200/B300 and GB200/GB300 NVL72 run it (reference/machines-2026.md "
               "sections 1-5 and 9)")


_NV2 = "NVLink2: 25 GB/s per link per direction [R]"
_NV3 = "NVLink3: 25 GB/s per link per direction [R]"
_NV4 = "NVLink4: 25 GB/s per link per direction [R]"
_NV5 = "NVLink5: 50 GB/s per link per direction [R]"
MODELS = (
    _m("V100", "nvlink", 25.0, 6, 3, 100, f"V100 (SXM2): 6 links, {_NV2}; PCIe gen3 [M]; DGX-1 NICs EDR 100 Gb/s [R]"),
    _m("A100", "nvlink", 25.0, 12, 4, 200, f"A100: 12 links, {_NV3}; PCIe gen4 [M]; HDR 200 Gb/s NICs [R]"),
    _m("A800", "nvlink", 25.0, 8, 4, 200, f"A800: 8 links, {_NV3} (400 GB/s bidirectional) [M]; PCIe gen4 [M]"),
    _m("H100", "nvlink", 25.0, 18, 5, 400, f"H100: 18 links, {_NV4}; PCIe gen5 [M]; NDR 400 Gb/s NICs [R]", nvls=True),
    _m("H800", "nvlink", 25.0, 8, 5, 400, f"H800: 8 links, {_NV4} [M]; PCIe gen5 [M]", nvls=True),
    _m("H200", "nvlink", 25.0, 18, 5, 400, f"H200: 18 links, {_NV4} [M]; PCIe gen5 [M]", nvls=True),
    _m("H20", "nvlink", 25.0, 18, 5, 400, f"H20: 18 links, {_NV4} (900 GB/s bidirectional) [M]; PCIe gen5 [M]",
       nvls=True),
    _m("B200", "nvlink", 50.0, 18, 5, 400, f"B200: 18 links, {_NV5}; PCIe gen5 [M]", nvls=True),
    _m("B300", "nvlink", 50.0, 18, 6, 800, f"B300: 18 links, {_NV5} [M]; PCIe gen6 [M]; 800 Gb/s NICs [M]",
       nvls=True),
    _m("GB200", "nvlink", 50.0, 18, 5, 800, f"GB200: 18 links, {_NV5} [R]; 800 Gb/s NICs [R range 400-800]",
       nvls=True),
    _m("L4", "none", 0.0, 0, 4, 100, "L4: no NVLink, PCIe gen4 [M]"),
    _m("L40", "none", 0.0, 0, 4, 100, "L40: no NVLink, PCIe gen4 [M]"),
    _m("L40S", "none", 0.0, 0, 4, 100, "L40S: no NVLink, PCIe gen4 [M]"),
    _m("T4", "none", 0.0, 0, 3, 100, "T4: no NVLink, PCIe gen3 [M]"),
    _m("A10", "none", 0.0, 0, 4, 100, "A10: no NVLink, PCIe gen4 [M]"),
    _m("A30", "nvlink", 25.0, 4, 4, 200, f"A30: NVLink bridge, 4 links, {_NV3} (200 GB/s bidirectional) [M]; "
                                         "PCIe gen4 [M]"),
    _m("A40", "nvlink", 14.0625, 4, 4, 100, "A40: NVLink bridge 112.5 GB/s bidirectional = 4 links x 14.0625 GB/s per "
                                             "direction [M]; PCIe gen4 [M]"),
    _m("RTX3090", "nvlink", 14.0625, 4, 4, 100, "RTX 3090: NVLink bridge 112.5 GB/s bidirectional = 4 links x "
                                                 "14.0625 GB/s "
                                                 "per direction (topo-samples EXPECTED.md); PCIe gen4 [M]"),
    _m("RTX4090", "none", 0.0, 0, 4, 100, "RTX 4090: no NVLink, PCIe gen4 [M]"),
    _m("RTX5090", "none", 0.0, 0, 5, 100, "RTX 5090: no NVLink, PCIe gen5 [M]"),
    _m("MI50", "xgmi", 46.0, 2, 4, 100, "MI50: 2 Infinity Fabric links of 92 GB/s bidirectional = 46 GB/s per "
                                        "direction [M]; PCIe gen4 [M]"),
    _m("MI100", "xgmi", 46.0, 3, 4, 200, "MI100: 3 Infinity Fabric links of 92 GB/s bidirectional [M]; PCIe gen4 [M]"),
    _m("MI210", "xgmi", 50.0, 3, 4, 200, "MI210: 3 Infinity Fabric links of 100 GB/s bidirectional [M]; PCIe gen4 [M]"),
    _m("MI250", "xgmi", 50.0, 8, 4, 200, "MI250: xGMI 50 GB/s per link per direction (25 GT/s x16) [R]; PCIe gen4 [M]"),
    _m("MI250X", "xgmi", 50.0, 8, 4, 200, "MI250X: xGMI 50 GB/s per link per direction (25 GT/s x16) [R]; "
                                           "PCIe gen4 [M]"),
    _m("MI300A", "xgmi", 64.0, 6, 5, 400, "MI300A: xGMI 64 GB/s per link per direction, as MI300X [R for MI300X]; "
                                          "PCIe gen5 [M]"),
    _m("MI300X", "xgmi", 64.0, 7, 5, 400, "MI300X: 7 xGMI links, 64 GB/s per link per direction [R]; PCIe gen5 [M]; "
                                          "400 Gb/s NICs [R]"),
    _m("MI308X", "xgmi", 64.0, 7, 5, 400, "MI308X: xGMI as MI300X [M]; PCIe gen5 [M]"),
    _m("MI325X", "xgmi", 64.0, 7, 5, 400, "MI325X: xGMI as MI300X, 64 GB/s per link per direction [M]; PCIe gen5 [M]"),
    _m("MI355X", "xgmi", 76.8, 7, 5, 400, "MI355X: 7 xGMI links of 153.6 GB/s bidirectional [M]; PCIe gen5 [M]"),
)
_BY_KEY = {re.sub(r"[^a-z0-9]", "", m.name.lower()): m for m in MODELS}
_ALIASES = {"geforcertx3090": "rtx3090", "geforcertx4090": "rtx4090", "geforcertx5090": "rtx5090", "3090": "rtx3090",
            "4090": "rtx4090", "5090": "rtx5090", "teslav100": "v100", "teslat4": "t4", "gb300": "b300"}

# PCI device ids (vendor 10de) and AMD gfx targets -> model, for NCCL/RCCL dumps [M: PCI ID database]
_DEVICES = {
    "1db1": "V100", "1db4": "V100", "1db5": "V100", "1db6": "V100", "1df6": "V100",
    "20b0": "A100", "20b2": "A100", "20b3": "A100", "20b5": "A100", "20f1": "A100", "20f3": "A800", "20f5": "A800",
    "2330": "H100", "2331": "H100", "2339": "H100", "2321": "H100", "2324": "H800", "2322": "H800",
    "2335": "H200", "233d": "H200", "2329": "H20", "2901": "B200",
    "1eb8": "T4", "27b8": "L4", "26b5": "L40", "26b9": "L40S", "2236": "A10", "20b7": "A30", "2235": "A40",
    "2204": "RTX3090", "2684": "RTX4090", "2b85": "RTX5090",
}
_GFX = {"gfx906": "MI50", "gfx908": "MI100", "gfx90a": "MI250X", "gfx940": "MI300A", "gfx941": "MI300X",
        "gfx942": "MI300X", "gfx950": "MI355X"}


# Architecture generations, oldest first, for messages that list models [M: vendor architecture names]
GENERATIONS = (
    ("Volta", ("V100",)), ("Turing", ("T4",)), ("Ampere", ("A100", "A800", "A10", "A30", "A40", "RTX3090")),
    ("Ada", ("L4", "L40", "L40S", "RTX4090")), ("Hopper", ("H100", "H800", "H200", "H20")),
    ("Blackwell", ("B200", "B300", "GB200", "RTX5090")), ("GCN5", ("MI50",)), ("CDNA1", ("MI100",)),
    ("CDNA2", ("MI210", "MI250", "MI250X")), ("CDNA3", ("MI300A", "MI300X", "MI308X", "MI325X")),
    ("CDNA4", ("MI355X",)),
)
SHORT_LIST = 4  # at most this many models are listed plainly; longer lists are grouped by generation


def names() -> list[str]:
    return [m.name for m in MODELS]


def listed(models) -> str:
    """The models' names for a one-line message: plainly when few, else grouped by generation in
    generation order ("Hopper H100/H200/H20, Blackwell B200/B300/GB200").

    >>> listed([model("a100")]), listed(MODELS[3:10])
    ('A100', 'Hopper H100/H800/H200/H20, Blackwell B200/B300/GB200')
    """
    chosen = {m.name for m in models}
    if len(chosen) <= SHORT_LIST:
        return ", ".join(m.name for m in MODELS if m.name in chosen)
    parts = []
    for generation, members in GENERATIONS:
        here = [name for name in members if name in chosen]
        if here:
            parts.append(f"{generation} {'/'.join(here)}")
    return ", ".join(parts)


def model(name: str) -> GpuModel:
    """The model ``name`` (any case; spaces, dashes and a 'NVIDIA'/'AMD'/'Instinct' prefix ignored)."""
    key = re.sub(r"[^a-z0-9]", "", str(name).lower())
    for prefix in ("nvidia", "amd", "instinct", "radeon", "tesla"):
        if key.startswith(prefix) and key[len(prefix):] in _BY_KEY:
            key = key[len(prefix):]
    key = _ALIASES.get(key, key)
    found = _BY_KEY.get(key)
    if found is None:
        raise InputError(f"unknown GPU model {name!r}; known: {', '.join(names())}")
    return found


def from_device(text: str | None) -> GpuModel | None:
    """The model an NCCL/RCCL dump names (``10de:2330``, ``gfx90a``, ``gcn:910``), or None."""
    if not text:
        return None
    text = text.strip().lower()
    if text.startswith("gcn:"):
        text = "gfx" + text[4:].replace("910", "90a")
    if text in _GFX:
        return model(_GFX[text])
    vendor, _, device = text.partition(":")
    if vendor in ("10de", "0x10de") and device.removeprefix("0x") in _DEVICES:
        return model(_DEVICES[device.removeprefix("0x")])
    return None
