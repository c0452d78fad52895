"""MachineDescription -> synth.topology: the modelling choices, each written into ``sources``.

- **GPU generation**: ``--gpu``, else the model the file names (an NCCL dump's PCI device id),
  else the NVLink pattern when it is unambiguous (an 8-GPU hybrid cube-mesh of NV1/NV2 = V100;
  8 GPUs all NV12 = A100); otherwise one line asking for ``--gpu`` that names the models fitting
  what the file shows (see ``fitting_models``). PCIe-only machines need no model when the file
  states every GPU's PCIe generation.
- **GPUs listed by PCI class only** (curated NCCL_TOPO_FILEs, which state no NVLink): the user
  says which board it is, ``--nvlink switch`` (every GPU one NVSwitch port of the model's NVLink
  count x per-link bandwidth, as for an NCCL dump whose NVLinks go into NVSwitches) or
  ``--nvlink none`` (PCIe only); without it, one line asking. ``--nvlink`` on a file that states
  its links is refused.
- **NVLink / xGMI**: ``NV#`` = # links x the generation's per-link bandwidth, one directed link
  each way. Every pair with the same count on more than 4 GPUs, or NVLinks into NVSwitches (an
  NCCL dump), is an NVSwitch machine, modelled as the library's ``a100``/``h100``: a full mesh at
  the per-GPU port bandwidth with groups ``gpuI-out``/``gpuI-in`` of one port each. GPUs with
  NVLink keep only NVLink links (runtimes do not send over PCIe there), except between NVLink
  islands (bridged pairs), which PCIe joins so that collectives stay possible.
- **NVLS**: an NVSwitch board of Hopper or newer GPUs (``GpuModel.nvls``) gets the library
  ``h100``'s switch ``nvswitch``: reduce + multicast, kind nvlink, ports at the GPU's NVLink port
  bandwidth sharing its ``gpuI-out``/``gpuI-in`` groups (the v2 ``switches`` of DESIGN.md). Older
  GPUs, AMD and boards without an NVSwitch get none; ``--nvls on|off`` overrides (``on`` without an
  NVSwitch is refused). A machine without a switch is written as ``synth.topology`` version 1.
- **PCIe**: links of the GPU's PCIe generation and width; groups for what the traffic shares:
  each GPU's own link (``gpuI-pcie-out/in``), each PCIe switch's uplink (GPUs at PIX/PXB of each
  other), each host bridge's (PHB), and the CPU-to-CPU interconnect between NUMA nodes (SYS), at
  NCCL's model figures.
- **NICs**: each NIC serves the GPUs closest to it (its nearest path type, unless that is SYS:
  such a NIC serves no GPU, e.g. a storage pair); NICs that share the same GPUs are dealt out to
  them one by one (a GPU with several gets their sum), so every GPU reaches the fabric through at
  most one NIC, as ``NAMExK`` composition needs. Speed: ``--nic-gbps``, the file's, or the usual
  one for the GPU generation (noted as an assumption).
"""

from __future__ import annotations

from collections import defaultdict

from synth.core.errors import InputError
from synth.core.subset import rank_ranges
from synth.core.topology import Group, Link, Nic, Switch, Topology
from synth.importers.gpus import MODELS, NVLS_SOURCE, PCIE_SOURCE, PCIE_X16_GBS, GpuModel, from_device, listed, model
from synth.importers.machine import PCIE_LEVELS, MachineDescription

NVLINK_ALPHA = 0.7  # us: the library's NVLink/xGMI alpha (TE-CCL; reference/hardware.md)
PCIE_ALPHA = 1.2  # us: NVLink's 0.7 x NCCL's Ring LL per-hop ratio PCIe/NVLink 1.0/0.6 (reference/nccl-model.md)
NIC_ALPHA = 2.0  # us: the library's NIC alpha (inside the 1.3-2.6 us IB range; reference/hardware.md)
SYS_GBS = {"intel": 10.0, "amd": 16.0, "power": 32.0, "arm": 6.0}  # NCCL topo.h SKL_QPI_BW, AMD_BW, P9_BW, ARM_BW
DEFAULT_SYS = "intel"
NVLINK_CHOICES = ("switch", "none")
NVLS_CHOICES = ("on", "off")
NVLS_SWITCH = "nvswitch"  # the name of the library h100's switch


def build_topology(desc: MachineDescription, name: str, where: str, gpu: str | None = None,
                   nic_gbps: float | None = None, cpu: str | None = None, nvlink: str | None = None,
                   nvls: str | None = None) -> Topology:
    """The synth.topology for ``desc``; InputError (one line, naming ``where``) when it cannot be
    modelled without more information. ``nvlink`` (switch, none): what a file that lists GPUs by
    PCI class only cannot say. ``nvls`` (on, off; None: automatic): whether the NVSwitch reduces
    and multicasts (see ``nvls_switch``)."""
    n = desc.gpus
    if n < 1:
        raise InputError(f"{where}: no GPUs found")
    _check_nvlink_choice(desc, where, nvlink)
    _check_nvls_choice(nvls)
    chosen = _gpu_model(desc, where, gpu, nvlink)
    sources = [f"imported from {where} ({desc.tool})"] + list(desc.notes)
    if chosen is not None:
        sources.append(f"GPU model {chosen.name}{' (--gpu)' if gpu else ''}: {chosen.source}")
    links: dict[tuple[int, int], Link] = {}
    groups: list[Group] = []
    ports = _nvlink(desc, chosen, nvlink, links, groups, sources)
    switches = nvls_switch(ports, chosen, nvls, where, sources)
    pcie_pairs = _pcie_pairs(desc, links)
    if pcie_pairs:
        _pcie(desc, pcie_pairs, chosen, where, links, groups, sources, cpu)
    nics = _nics(desc, chosen, nic_gbps, sources)
    return Topology(name, n, tuple(links[k] for k in sorted(links)), tuple(groups), machines=(tuple(range(n)),),
                    nics=nics, sources=tuple(sources), switches=switches, arch=chosen.arch if chosen else None)


def _nvlink(desc: MachineDescription, chosen, nvlink: str | None, links, groups, sources) -> tuple[int, ...] | None:
    """Add the NVLink / xGMI links (and, on an NVSwitch board, the port groups); return the NVLinks
    of every GPU's NVSwitch port on an NVSwitch board, else None."""
    n = desc.gpus
    fast = {k: p for k, p in desc.pairs.items() if p.kind in ("nvlink", "xgmi")}
    ports, why = None, ""
    if nvlink == "switch":
        ports = (chosen.links,) * n
        why = (f"--nvlink switch: the file lists GPUs by PCI class only; the user says every GPU's "
               f"{chosen.links} {chosen.name} NVLinks go into NVSwitches")
    elif nvlink == "none":
        sources.append("--nvlink none: the file lists GPUs by PCI class only; the user says they have no NVLink "
                       "(PCIe only)")
    elif desc.switch_links and any(desc.switch_links):
        ports, why = tuple(desc.switch_links), "NVLinks into NVSwitches (the file)"
    elif fast and len(fast) == n * (n - 1) // 2 and n > 4 and len({p.links for p in fast.values()}) == 1:
        count = next(iter(fast.values())).links
        ports, why = (count,) * n, f"every pair NV{count} on {n} GPUs: an NVSwitch board"
    else:
        for (i, j), path in sorted(fast.items()):
            gbs = path.bandwidth or path.links * chosen.link_gbs
            for a, b in ((i, j), (j, i)):
                links[(a, b)] = Link(a, b, gbs, NVLINK_ALPHA, kind=path.kind)
        if fast:
            sources.append(f"{len(fast)} GPU pairs joined directly by {chosen.kind if chosen else 'NVLink'}: "
                           f"links x {chosen.link_gbs:g} GB/s per direction, alpha {NVLINK_ALPHA} us")
    if ports is not None:
        _switch(ports, chosen, links, groups, sources, why)
    return ports


def _check_nvls_choice(nvls: str | None) -> None:
    if nvls is not None and nvls not in NVLS_CHOICES:
        raise InputError(f"--nvls must be one of {', '.join(NVLS_CHOICES)}, got {nvls!r}")


def nvls_switch(ports: tuple[int, ...] | None, chosen: GpuModel | None, nvls: str | None, where: str,
                sources: list[str]) -> tuple[Switch, ...]:
    """The NVSwitch as a switch that computes, or nothing; the choice is written into ``sources``.

    Rule: an NVSwitch board (``ports`` not None) whose GPU model is Hopper or newer
    (``GpuModel.nvls``) gets NVLink SHARP, as the library's ``h100``: one switch ``nvswitch`` over
    every GPU with a port, ``reduce`` + ``multicast`` (not both in one pass), kind nvlink, each
    port at the smallest GPU port bandwidth with the NVLink alpha, sharing the GPU's
    ``gpuI-out`` / ``gpuI-in`` groups with the NVLink sends. Older GPUs, AMD and boards without
    an NVSwitch get none. ``nvls`` overrides the rule: ``off`` never, ``on`` always, and ``on``
    without an NVSwitch is an InputError.

    >>> [s.name for s in nvls_switch((18,) * 8, model("h100"), None, "t.txt", [])]
    ['nvswitch']
    >>> nvls_switch((12,) * 8, model("a100"), None, "t.txt", []), nvls_switch(None, model("h100"), "off", "t", [])
    ((), ())
    """
    if ports is None:
        if nvls == "on":
            raise InputError(f"{where}: --nvls on: the file shows no NVSwitch (NVLS is NVLink SHARP in the "
                             "NVSwitch); leave --nvls out or give --nvls off")
        return ()
    hopper = chosen is not None and chosen.nvls
    if nvls == "off" or (nvls is None and not hopper):
        sources.append(_no_nvls(chosen, nvls))
        return ()
    members = tuple(i for i, p in enumerate(ports) if p > 0)
    gbs = min(ports[i] for i in members) * chosen.link_gbs
    why = (f"{chosen.name} is Hopper or newer" if nvls is None else
           "--nvls on" + ("" if hopper else f" (the user's word: {chosen.name} is older than Hopper)"))
    sources.append(f"NVSwitch with NVLink SHARP (NVLS; {why}): switch '{NVLS_SWITCH}' over ranks "
                   f"{rank_ranges(members)}: reduce (multimem.ld_reduce) and multicast (multimem.st), not both "
                   f"in one pass; ports at {gbs:g} GB/s, alpha {NVLINK_ALPHA} us, kind nvlink, sharing the "
                   "gpuI-out / gpuI-in groups with the NVLink sends, as the library's h100 (reference/in-network.md "
                   f"sections 2.1 and 3); {NVLS_SOURCE}")
    return (Switch(NVLS_SWITCH, members, gbs, NVLINK_ALPHA, reduce=True, multicast=True,
                   out_groups=tuple(f"gpu{i}-out" for i in members), in_groups=tuple(f"gpu{i}-in" for i in members),
                   kind="nvlink"),)


def _no_nvls(chosen: GpuModel | None, nvls: str | None) -> str:
    """The source line of an NVSwitch board modelled without NVLS."""
    if nvls == "off":
        return "NVSwitch without NVLS (--nvls off): no switch reduces or multicasts; point-to-point NVLink only"
    what = "an unknown GPU" if chosen is None else f"{chosen.name}, older than Hopper"
    return (f"NVSwitch without NVLS ({what}; {NVLS_SOURCE}): no switch reduces or multicasts; --nvls on "
            "models one anyway")


def _check_nvlink_choice(desc: MachineDescription, where: str, nvlink: str | None) -> None:
    """A file that lists GPUs by PCI class only needs ``nvlink``; any other file refuses it."""
    if nvlink is not None and nvlink not in NVLINK_CHOICES:
        raise InputError(f"--nvlink must be one of {', '.join(NVLINK_CHOICES)}, got {nvlink!r}")
    if desc.class_only and nvlink is None:
        raise InputError(f"{where}: the file lists GPUs by PCI class only and no NVLink (NCCL detects it at run "
                         "time): give --nvlink switch (an NVSwitch board: one port of the --gpu model's NVLinks per "
                         "GPU) or --nvlink none (PCIe only), or import 'nvidia-smi topo -m' from that machine instead")
    if not desc.class_only and nvlink is not None:
        raise InputError(f"{where}: --nvlink is for NCCL topology files that list GPUs by PCI class only; this "
                         f"{desc.tool} file states the GPUs' links itself")


def _gpu_model(desc: MachineDescription, where: str, gpu: str | None, nvlink: str | None = None) -> GpuModel | None:
    chosen = _named_model(desc, gpu)
    if nvlink == "switch" and chosen is not None and (chosen.kind != "nvlink" or not chosen.links):
        raise InputError(f"{where}: --nvlink switch: {chosen.name} has no NVLink "
                         f"({'xGMI instead' if chosen.kind == 'xgmi' else 'PCIe only'}); give --nvlink none "
                         "or a GPU model with NVLink")
    if chosen is not None:
        _check_link_kind(desc, chosen, where, gpu)
        return chosen
    fast = [p for p in desc.pairs.values() if p.kind in ("nvlink", "xgmi")]
    needs = bool(fast or any(desc.switch_links) or nvlink == "switch")
    if not needs and desc.pcie_gen and all(g for g in desc.pcie_gen):
        return None
    counts = {p.links for p in fast}
    what = (f"NV{'/NV'.join(str(c) for c in sorted(counts))} links" if counts and fast[0].kind == "nvlink" else
            "xGMI links" if counts else "NVSwitch links" if any(desc.switch_links) else
            "NVSwitch ports (--nvlink switch)" if nvlink == "switch" else "PCIe links of unknown generation")
    fits = fitting_models(desc, nvlink)
    which = "any model (PCIe only)" if len(fits) == len(MODELS) else "one that fits"
    raise InputError(f"{where}: the file does not say which GPU this is, and {what} do not tell its generation: "
                     f"give --gpu, {which}: {listed(fits)}")


def _check_link_kind(desc: MachineDescription, chosen: GpuModel, where: str, gpu: str | None) -> None:
    """The model must have the scale-up links the file shows (NVLink, NVSwitch ports, xGMI): an
    NV18 matrix read as an L40S (no NVLink) or an MI300X (xGMI) is one line naming the models that
    fit."""
    kinds = {p.kind for p in desc.pairs.values() if p.kind in ("nvlink", "xgmi")}
    kinds |= {"nvlink"} if any(desc.switch_links) else set()
    if not kinds or (kinds == {chosen.kind} and chosen.link_gbs > 0):
        return
    names = {"nvlink": "NVLink", "xgmi": "xGMI"}
    shown = " and ".join(names[kind] for kind in sorted(kinds))
    by = "--gpu" if gpu else "named by the file"
    raise InputError(f"{where}: the file shows {shown} links and {chosen.name} ({by}) has "
                     f"{names.get(chosen.kind, 'neither (PCIe only)')}: give --gpu, one that fits: "
                     f"{listed(fitting_models(desc))}")


def _named_model(desc: MachineDescription, gpu: str | None) -> GpuModel | None:
    """``--gpu``, else the model the file names, else the one an unambiguous NVLink pattern shows."""
    if gpu:
        return model(gpu)
    named = from_device(desc.gpu_model)
    if named is not None:
        return named
    fast = [p for p in desc.pairs.values() if p.kind in ("nvlink", "xgmi")]
    counts = {p.links for p in fast}
    if desc.gpus == 8 and len(fast) == 16 and counts == {1, 2}:
        return model("V100")
    if desc.gpus == 8 and len(fast) == 28 and counts == {12}:
        return model("A100")
    return None


def link_figures(desc: MachineDescription) -> set[int]:
    """The NVLink/xGMI links per GPU the file shows, as candidates: the most any GPU has to its
    peers together (a direct mesh or bridge), and, when every pair shows the same count, that
    count (one NVSwitch port per GPU); NCCL's NVSwitch links: the most any GPU has. Empty when the
    file shows no such link."""
    if any(desc.switch_links):
        return {max(desc.switch_links)}
    fast = {k: p for k, p in desc.pairs.items() if p.kind in ("nvlink", "xgmi")}
    if not fast:
        return set()
    per_gpu = [0] * desc.gpus
    for (i, j), path in fast.items():
        per_gpu[i] += path.links
        per_gpu[j] += path.links
    figures = {max(per_gpu)}
    counts = {p.links for p in fast.values()}
    if len(counts) == 1 and len(fast) == desc.gpus * (desc.gpus - 1) // 2:
        figures |= counts
    return figures


def fitting_models(desc: MachineDescription, nvlink: str | None = None) -> list[GpuModel]:
    """The GPU models that fit what the file shows. PCIe only: every model. NVLink: the models with
    NVLink whose links per GPU equal one of ``link_figures``; when none does, those with at least
    the fewest of them. xGMI: every model with xGMI (rocm-smi's counts are not bonded-link counts).
    ``--nvlink switch`` on a file that lists GPUs by class only: every model with NVLink.

    >>> from synth.importers.machine import GpuPath
    >>> board = MachineDescription("t", 8, {(i, j): GpuPath("nvlink", 18) for i in range(8) for j in range(i + 1, 8)})
    >>> [m.name for m in fitting_models(board)]
    ['H100', 'H200', 'H20', 'B200', 'B300', 'GB200']
    """
    kinds = {p.kind for p in desc.pairs.values() if p.kind in ("nvlink", "xgmi")}
    if any(desc.switch_links) or nvlink == "switch":
        kinds.add("nvlink")
    if not kinds:
        return list(MODELS)
    same_kind = [m for m in MODELS if m.kind in kinds and m.links]
    figures = link_figures(desc)
    if not figures or kinds != {"nvlink"}:
        return same_kind
    exact = [m for m in same_kind if m.links in figures]
    return exact or [m for m in same_kind if m.links >= min(figures)] or same_kind


def _switch(ports, chosen, links, groups, sources, why: str) -> None:
    n = len(ports)
    gbs = [p * chosen.link_gbs for p in ports]
    for i in range(n):
        for j in range(n):
            if i != j:
                links[(i, j)] = Link(i, j, min(gbs[i], gbs[j]), NVLINK_ALPHA, kind="nvlink")
    for i in range(n):
        groups.append(Group(f"gpu{i}-out", tuple((i, j) for j in range(n) if j != i), gbs[i]))
        groups.append(Group(f"gpu{i}-in", tuple((j, i) for j in range(n) if j != i), gbs[i]))
    sources.append(f"NVSwitch ({why}): a full mesh at the per-GPU port bandwidth ({_ports(ports, chosen)}) plus "
                   "groups gpuI-out / gpuI-in of one port each, as the library's a100/h100 (synth modelling choice)")


def _ports(ports, chosen) -> str:
    distinct = sorted(set(ports))
    return ", ".join(f"{p} links x {chosen.link_gbs:g} = {p * chosen.link_gbs:g} GB/s" for p in distinct)


def _pcie_pairs(desc: MachineDescription, links) -> list[tuple[int, int]]:
    """GPU pairs joined over PCIe: all of them when nothing faster exists, else only pairs in
    different islands of the fast links."""
    n = desc.gpus
    if not links:
        return [(i, j) for i in range(n) for j in range(i + 1, n)]
    island = list(range(n))

    def find(x):
        while island[x] != x:
            island[x] = island[island[x]]
            x = island[x]
        return x

    for a, b in links:
        island[find(a)] = find(b)
    return [(i, j) for i in range(n) for j in range(i + 1, n) if find(i) != find(j)]


def _pcie(desc, pairs, chosen, where, links, groups, sources, cpu) -> None:
    n = desc.gpus
    gen = [(desc.pcie_gen[i] if i < len(desc.pcie_gen) and desc.pcie_gen[i] else None) or
           (chosen.pcie if chosen else None) for i in range(n)]
    width = [(desc.pcie_width[i] if i < len(desc.pcie_width) and desc.pcie_width[i] else None) or 16
             for i in range(n)]
    if any(g is None or g not in PCIE_X16_GBS for g in gen):
        raise InputError(f"{where}: the PCIe generation of some GPUs is unknown: give --gpu")
    bw = [PCIE_X16_GBS[gen[i]] * width[i] / 16 for i in range(n)]
    used = set()
    for i, j in pairs:
        for a, b in ((i, j), (j, i)):
            links[(a, b)] = Link(a, b, min(bw[a], bw[b]), PCIE_ALPHA, kind="pcie")
            used.add((a, b))
    for i in range(n):
        out = tuple(sorted(l for l in used if l[0] == i))
        if out:
            groups.append(Group(f"gpu{i}-pcie-out", out, bw[i]))
            groups.append(Group(f"gpu{i}-pcie-in", tuple(sorted((b, a) for a, b in out)), bw[i]))
    level = {}
    for (i, j), path in desc.pairs.items():
        level[(i, j)] = level[(j, i)] = path.level
    switch = _clusters(n, level, ("PIX", "PXB"))
    bridges = [c for c in _clusters(n, level, ("PIX", "PXB", "PHB")) if c not in switch]
    for prefix, clusters in (("pcieswitch", switch), ("hostbridge", bridges)):
        for k, members in enumerate(c for c in clusters if len(c) > 1):
            up = tuple(sorted(l for l in used if l[0] in members and l[1] not in members))
            if up:  # what leaves the switch (host bridge) shares its one uplink (root port)
                gbs = min(bw[m] for m in members)
                groups.append(Group(f"{prefix}{k}-up", up, gbs))
                groups.append(Group(f"{prefix}{k}-down", tuple(sorted((b, a) for a, b in up)), gbs))
    numa = tuple(desc.numa) + (None,) * (n - len(desc.numa))
    nodes = _clusters(n, level, ("PIX", "PXB", "PHB", "NODE"),
                      lambda x, y: numa[x] is not None and numa[x] == numa[y])  # one CPU: NODE or same NUMA
    sys_gbs = SYS_GBS[cpu or DEFAULT_SYS]
    crossings = 0
    for a, ca in enumerate(nodes):
        for b, cb in enumerate(nodes):
            cross = tuple(sorted(l for l in used if l[0] in ca and l[1] in cb))
            if a != b and cross:
                groups.append(Group(f"cpu{a}-to-cpu{b}", cross, sys_gbs))
                crossings += 1
    sources.append(f"{len(pairs)} GPU pairs over PCIe: gen{'/'.join(sorted({str(g) for g in gen}))} x"
                   f"{'/'.join(sorted({str(w) for w in width}))}, alpha {PCIE_ALPHA} us (NVLink's 0.7 us x NCCL's "
                   "PCIe/NVLink per-hop latency ratio 1.0/0.6, reference/nccl-model.md); " + PCIE_SOURCE)
    sources.append(f"PCIe sharing from the path types: {len([c for c in switch if len(c) > 1])} PCIe switch(es) "
                   f"(PIX/PXB) and {len([c for c in bridges if len(c) > 1])} host bridge(s) (PHB) with GPUs behind "
                   f"them share one uplink each; {len(nodes)} NUMA node(s) (NODE), {crossings} CPU-interconnect "
                   "crossing group(s) "
                   f"(SYS) at {sys_gbs:g} GB/s per direction (NCCL topo.h {cpu or DEFAULT_SYS} figure)")


def _clusters(n: int, level, close, together=lambda x, y: False) -> list[frozenset[int]]:
    """GPUs grouped by 'path type in ``close``, or ``together``' (transitively); unknown levels join
    nothing."""
    seen, out = set(), []
    for start in range(n):
        if start in seen:
            continue
        todo, members = [start], {start}
        while todo:
            x = todo.pop()
            for y in range(n):
                if y not in members and (level.get((x, y)) in close or together(x, y)):
                    members.add(y)
                    todo.append(y)
        seen |= members
        out.append(frozenset(members))
    return out


def _nics(desc: MachineDescription, chosen, nic_gbps, sources) -> tuple[Nic, ...]:
    if not desc.nics:
        return ()
    nearest_of = []
    idle = []
    for nic in desc.nics:
        known = [(PCIE_LEVELS.index(l), g) for g, l in enumerate(nic.levels) if l in PCIE_LEVELS and g < desc.gpus]
        nearest = min((k for k, _ in known), default=None)
        if nearest is None or PCIE_LEVELS[nearest] == "SYS":
            idle.append(nic.name)
            continue
        nearest_of.append((nic, frozenset(g for k, g in known if k == nearest)))
    # NICs whose nearest GPUs overlap form one cluster; clusters have disjoint GPUs
    clusters: list[tuple[set, list]] = []
    for nic, gpus in nearest_of:
        joined = [c for c in clusters if c[0] & gpus]
        merged = (set(gpus).union(*(c[0] for c in joined)), [x for c in joined for x in c[1]] + [nic])
        clusters = [c for c in clusters if not c[0] & gpus] + [merged]
    per_gpu: dict[int, list] = defaultdict(list)
    shared: list[tuple[tuple[int, ...], object]] = []
    for gpus, nics in clusters:
        ordered = sorted(gpus)
        if len(nics) >= len(ordered):
            for k, nic in enumerate(nics):
                per_gpu[ordered[k % len(ordered)]].append(nic)
        else:
            for k, nic in enumerate(nics):
                part = ordered[k * len(ordered) // len(nics):(k + 1) * len(ordered) // len(nics)]
                shared.append((tuple(part), nic))
    speeds = []

    def gbs(nic) -> float:
        if nic_gbps:
            rate, why = nic_gbps, "--nic-gbps"
        elif nic.gbps:
            rate, why = nic.gbps, "the file"
        else:
            rate = chosen.nic_gbps if chosen else 100.0
            why = f"assumed: the usual NIC of {chosen.name} machines" if chosen else "assumed"
        speeds.append((rate, why))
        return rate * max(1, nic.ports) / 8

    out = [Nic("+".join(n.name for n in nics), (g,), sum(gbs(n) for n in nics), NIC_ALPHA)
           for g, nics in sorted(per_gpu.items())]
    out += [Nic(nic.name, ranks, gbs(nic), NIC_ALPHA) for ranks, nic in shared]
    rates = sorted(set(speeds))
    sources.append(f"NICs: {len(out)} serving GPUs ({', '.join(f'{r:g} Gb/s ({w})' for r, w in rates)}; "
                   f"GB/s = Gb/s x ports / 8), alpha {NIC_ALPHA} us (library NIC alpha, reference/hardware.md); each "
                   "serves the GPUs at its nearest path type" + (f"; not near any GPU (SYS only), left out: "
                                                                 f"{', '.join(idle)}" if idle else ""))
    return tuple(sorted(out, key=lambda nic: nic.ranks))
