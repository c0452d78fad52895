"""What a topology tool says about one machine, before any modelling choice (the importers' IR).

Each reader (nvidia_smi, nccl_xml, rocm_smi) turns its tool's output into a ``MachineDescription``:
the GPUs, what connects every pair of them, which GPUs each NIC is closest to, NUMA nodes, and
whatever the tool states outright (GPU model, NIC speed, PCIe generation and width). The builder
(synth.importers.build) turns it into a synth.topology with bandwidths, switch groups and sources.
Readers never guess bandwidths; they record what the file says and where (``where`` strings such
as ``"row GPU3, column GPU5"`` or ``"<gpu dev=3>"``) so errors and sources can name it.

>>> pair = GpuPath("nvlink", links=2, where="row GPU0, column GPU1")
>>> MachineDescription("nvidia-smi", 2, {(0, 1): pair}).path(1, 0).links
2
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

PCIE_LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")  # nvidia-smi's path types, nearest first
PATH_KINDS = ("nvlink", "xgmi", "pcie")


@dataclass(frozen=True)
class GpuPath:
    """How two GPUs reach each other. ``kind``: nvlink, xgmi or pcie. ``links``: bonded NVLink or
    xGMI links (nvidia-smi's NV#, NCCL's nvlink count, rocm-smi's link count; 0 for pcie).
    ``level``: the PCIe path type (PIX, PXB, PHB, NODE, SYS) when the tool says it, also for pairs
    with NVLink where it is known. ``bandwidth``: GB/s per direction when the tool states it (an
    NCCL dump's link speed), else None. ``where``: the place in the file it was read from."""

    kind: str
    links: int = 0
    level: str | None = None
    bandwidth: float | None = None
    where: str = ""


@dataclass(frozen=True)
class Nic:
    """A NIC: its name as the tool prints it, its path type to every GPU (index = GPU; None when
    unknown), its speed in Gb/s when the tool states it, and the ports it has (NCCL dumps)."""

    name: str
    levels: tuple[str | None, ...]
    gbps: float | None = None
    ports: int = 1
    where: str = ""


@dataclass(frozen=True)
class MachineDescription:
    """One machine as a tool describes it.

    ``pairs`` maps (i, j) with i < j to the GpuPath between GPUs i and j (missing pairs: no path
    the tool reports). ``switch_links`` (NCCL dumps): per GPU, the NVLinks it has to NVSwitches
    (then ``pairs`` need not list NVLink pairs). ``numa``: per GPU its NUMA node / CPU socket, when
    known. ``gpu_model``: the model the file names (NCCL dump: from the PCI device id), else None.
    ``pcie_gen`` / ``pcie_width``: per GPU when the file states them. ``notes``: what the reader
    wants recorded in the topology's sources (one line each). ``class_only``: the file lists GPUs
    by PCI class only and so cannot say whether they have NVLink (a curated NCCL_TOPO_FILE; NCCL
    detects NVLink at run time): the builder then needs the user's word (``--nvlink``).
    """

    tool: str
    gpus: int
    pairs: Mapping[tuple[int, int], GpuPath] = field(default_factory=dict)
    nics: tuple[Nic, ...] = ()
    numa: tuple[int | None, ...] = ()
    switch_links: tuple[int, ...] = ()
    gpu_model: str | None = None
    pcie_gen: tuple[int | None, ...] = ()
    pcie_width: tuple[int | None, ...] = ()
    notes: tuple[str, ...] = ()
    class_only: bool = False

    def path(self, i: int, j: int) -> GpuPath | None:
        """The path between GPUs i and j, in either order."""
        return self.pairs.get((min(i, j), max(i, j)))
