"""Read NCCL's topology XML (NCCL_TOPO_DUMP_FILE, curated NCCL_TOPO_FILEs, RCCL's dialect).

The file is a tree: ``<system>`` holds one ``<cpu>`` per NUMA node; ``<pci>`` elements nest below
it (switches, bridges, endpoints); a GPU is a ``<pci>`` holding ``<gpu dev=...>``, whose
``<nvlink>`` (NVIDIA) or ``<xgmi>`` (RCCL) children name the bus id they reach (another GPU or an
NVSwitch); a NIC is a ``<nic>`` holding one ``<net>`` per port. PCIe path types come from the
tree: PIX (both directly below one ``<pci>``), PXB (same PCIe tree further up), NODE (same
``<cpu>``), SYS (different CPUs). Unknown elements and attributes are ignored. NCCL graph files
(``<graphs>``: rings and trees) are refused. Every error is one line, an InputError.

Curated NCCL_TOPO_FILEs (cloud VM images) may list GPUs and NICs as bare ``<pci>`` endpoints known
only by their PCI class: a file with no ``<gpu>`` element reads every ``<pci>`` of class 0x0300xx
(VGA) or 0x0302xx (3D controller) as a GPU, numbered in file (document) order, and every ``<pci>``
of class 0x0200xx (Ethernet) or 0x0207xx (InfiniBand) that holds no ``<nic>`` as a one-port NIC
named by its bus id, speed not stated. Such a file says nothing about NVLink (NCCL detects it at
run time), so the description is marked ``class_only`` and the builder asks which it is. A file
with ``<gpu>`` elements reads only those, as NCCL does.

>>> d = read_nccl_xml('''<system version="1"><cpu numaid="0"><pci busid="0000:01:00.0">
...  <pci busid="0000:02:00.0" vendor="0x10de" device="0x2330" link_speed="32.0 GT/s PCIe"><gpu dev="0"/></pci>
...  <pci busid="0000:03:00.0" vendor="0x10de" device="0x2330"><gpu dev="1">
...   <nvlink target="02:00.0" count="4" tclass="0x030200"/></gpu></pci></pci></cpu></system>''', "t.xml")
>>> d.gpus, d.gpu_model, d.pcie_gen, d.numa
(2, '10de:2330', (5, None), (0, 0))
>>> d.path(0, 1)
GpuPath(kind='nvlink', links=4, level='PIX', bandwidth=None, where='<gpu dev=1> <nvlink target=02:00.0>')
>>> bare = read_nccl_xml('''<system version="1"><cpu numaid="0"><pci busid="ffff:ff:01.0" class="0x060400">
...  <pci busid="0001:00:00.0" class="0x030200" link_speed="16 GT/s" link_width="16"/>
...  <pci busid="0101:00:00.0" class="0x020700"/></pci></cpu></system>''', "t.xml")
>>> bare.gpus, bare.class_only, bare.pcie_gen, [(n.name, n.levels) for n in bare.nics]
(1, True, (4,), [('ib-0101:00:00.0', ('PIX',))])
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from xml.parsers import expat

from synth.core.errors import InputError
from synth.importers.machine import GpuPath, MachineDescription, Nic

TOOL = "nccl-xml"
NVSWITCH_CLASS = 0x068000
GPU_CLASSES = (0x0300, 0x0302)  # PCI base class + subclass: VGA controller, 3D controller
NIC_CLASSES = {0x0200: "eth", 0x0207: "ib"}  # Ethernet, InfiniBand controller
LINK_KINDS = {"nvlink": "nvlink", "xgmi": "xgmi"}
GRAPH_TAGS = ("graphs", "graph", "channel")
GRAPH_MESSAGE = ("an NCCL graph file (rings and trees), not a topology: "
                 "dump the topology with NCCL_TOPO_DUMP_FILE")
GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6, 128.0: 7}
MAX_INT = 2**31 - 1
MAX_GPUS = 512


@dataclass(frozen=True)
class _Gpu:
    """One GPU: its number, the element that describes it (``<gpu>``, or the ``<pci>`` itself for a
    GPU known by class only), its ``<pci>``, bus id, and how messages name it."""

    dev: int
    el: ET.Element
    pci: ET.Element
    busid: str | None
    label: str


def looks_like(text: str) -> bool:
    """True when the text looks like NCCL/RCCL topology or graph XML (``<system`` or ``<graphs``
    near the start).

    >>> looks_like('<?xml version="1.0"?>\\n<system version="1">'), looks_like("GPU0 GPU1")
    (True, False)
    """
    return re.search(r"<(system|graphs)[\s>/]", text[:4096]) is not None


def read_nccl_xml(text: str, where: str) -> MachineDescription:
    """The MachineDescription an NCCL/RCCL topology XML text describes; ``where`` (the file name)
    starts every error message."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    root = _parse(text.lstrip("\ufeff"), where)
    parent = _parents(root)
    class_only = _check_root(root, where)
    gpus = _class_gpus(root, where) if class_only else _find_gpus(root, parent, where)
    notes: list[str] = []
    devs = [g.dev for g in gpus]
    if class_only:
        notes.append("GPUs listed as <pci> elements by PCI class only (no <gpu> elements): numbered in file order; "
                     "the file states no NVLink (NCCL detects it at run time)")
    elif devs != list(range(len(gpus))):
        shown = ", ".join(map(str, devs[:8])) + (", ..." if len(devs) > 8 else "")
        notes.append(f"GPU dev values {shown} are not 0..{len(gpus) - 1}: GPUs numbered in dev order")
    chains = [_chain(g.pci, parent) for g in gpus]
    switch, linked = _links(gpus, root, where, notes)
    pairs = {}
    for i in range(len(gpus)):
        for j in range(i + 1, len(gpus)):
            level = _level(chains[i], chains[j])
            pcie = ("pcie", 0, f"{gpus[i].label} and {gpus[j].label}")
            kind, links, here = linked.get((i, j), pcie)
            pairs[(i, j)] = GpuPath(kind, links=links, level=level, where=here)
    nics = _nics(root, parent, chains, where, notes) + (_class_nics(root, parent, chains) if class_only else ())
    model = _model(gpus, notes)
    notes.insert(0, _summary(root, gpus, model, nics, switch, linked, class_only))
    return MachineDescription(
        TOOL, len(gpus), pairs, nics=nics,
        numa=tuple(_numa(chain, where) for chain in chains),
        switch_links=tuple(switch) if any(switch) else (),
        gpu_model=model,
        pcie_gen=tuple(_gen(g.pci.get("link_speed")) for g in gpus),
        pcie_width=tuple(_width(g.pci.get("link_width")) for g in gpus),
        notes=tuple(notes), class_only=class_only)


def _parse(text: str, where: str) -> ET.Element:
    if not text.strip():
        raise InputError(f"{where}: empty file, not NCCL topology XML")
    if re.search(r"<!(DOCTYPE|ENTITY)", text, re.IGNORECASE):
        raise InputError(f"{where}: refusing XML with <!DOCTYPE> or <!ENTITY> declarations "
                         "(entity expansion); NCCL topology files have none")
    try:
        return ET.fromstring(text)
    except ET.ParseError as err:
        line, column = err.position
        reason = expat.errors.messages.get(err.code, "syntax error")
        reason = re.sub(r"^not well-formed \((.*)\)$", r"\1", reason)
        raise InputError(f"{where}: line {line}, column {column + 1}: not well-formed XML ({reason})") from None
    except (ValueError, OverflowError, RecursionError, MemoryError) as err:
        raise InputError(f"{where}: not readable as XML ({type(err).__name__})") from None


def _show(value: str | None, limit: int = 40) -> str:
    """An attribute value fit for a one-line message."""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[:limit] + "..."


def _describe(el: ET.Element) -> str:
    for key in ("dev", "busid", "name", "target", "numaid"):
        if key in el.attrib:
            return f"<{_show(el.tag)} {key}={_show(el.attrib[key])}>"
    return f"<{_show(el.tag)}>"


def _int(value: str, what: str, here: str, low: int = 0) -> int:
    text = value.strip()
    if re.fullmatch(r"[+-]?\d{1,10}", text) and low <= int(text) <= MAX_INT:
        return int(text)
    raise InputError(f'{here}: {what}="{_show(value)}" is not an integer from {low} to {MAX_INT}')


def _hex(value: str | None) -> int | None:
    match = re.fullmatch(r"\s*(?:0x)?([0-9a-f]{1,8})\s*", (value or "").lower())
    return int(match.group(1), 16) if match else None


def _busid(value: str) -> str:
    """Bus ids compared the way NCCL does: case-insensitive, with the PCI domain optional."""
    parts = value.strip().lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    if len(parts) == 3 and _hex(parts[0]) is not None and not parts[0].startswith("0x"):
        parts[0] = f"{_hex(parts[0]):04x}"
    return ":".join(parts)


def _parents(root: ET.Element) -> dict[ET.Element, ET.Element]:
    parent, stack = {}, [root]
    while stack:
        el = stack.pop()
        for child in el:
            parent[child] = el
            stack.append(child)
    return parent


def _chain(el: ET.Element, parent: dict[ET.Element, ET.Element]) -> list[ET.Element]:
    """el, its parent, ..., the root."""
    chain = [el]
    while chain[-1] in parent:
        chain.append(parent[chain[-1]])
    return chain


def _level(a: list[ET.Element], b: list[ET.Element]) -> str:
    """The PCIe path type between two endpoints, from their chains of ancestors."""
    cpu_a = next((el for el in a if el.tag == "cpu"), None)
    cpu_b = next((el for el in b if el.tag == "cpu"), None)
    if cpu_a is None or cpu_a is not cpu_b:
        return "SYS"
    in_b = {id(el): k for k, el in enumerate(b)}
    ia, common = next((k, el) for k, el in enumerate(a) if id(el) in in_b)
    if common.tag != "pci":
        return "NODE"
    return "PIX" if ia <= 1 and in_b[id(common)] <= 1 else "PXB"


def _pci_class(el: ET.Element) -> int | None:
    """The PCI base class + subclass (``class="0x030200"`` -> 0x0302), None when not stated."""
    value = _hex(el.get("class"))
    return None if value is None else value >> 8


def _check_root(root: ET.Element, where: str) -> bool:
    """Refuse what is not a topology; True when the GPUs are known by PCI class only (no ``<gpu>``
    element, but ``<pci>`` elements of a GPU class)."""
    tags = {el.tag for el in root.iter()}
    graphish = root.tag in GRAPH_TAGS or "graph" in tags or "channel" in tags
    if root.tag == "system" and "gpu" in tags:
        return False
    if graphish:
        raise InputError(f"{where}: {GRAPH_MESSAGE}")
    if root.tag != "system":
        raise InputError(f"{where}: the root element is <{_show(root.tag)}>, not <system>: "
                         "not NCCL topology XML")
    if any(_pci_class(el) in GPU_CLASSES for el in root.iter("pci")):
        return True
    raise InputError(f"{where}: <system> holds no <gpu> element and no <pci> of a GPU class "
                     "(0x0300xx, 0x0302xx): no GPUs to import")


def _class_gpus(root: ET.Element, where: str) -> list[_Gpu]:
    """The ``<pci>`` elements of a GPU class, in file order."""
    gpus, seen = [], set()
    for el in root.iter("pci"):
        if _pci_class(el) not in GPU_CLASSES:
            continue
        busid = _busid(el.get("busid")) if el.get("busid") else None
        label = _describe(el) if busid else f"<pci class={_show(el.get('class'))}> #{len(gpus)}"
        if busid is not None and busid in seen:
            raise InputError(f"{where}: two GPU <pci> elements with busid {_show(el.get('busid'))}")
        seen.add(busid)
        gpus.append(_Gpu(len(gpus), el, el, busid, label))
        if len(gpus) > MAX_GPUS:
            raise InputError(f"{where}: more than {MAX_GPUS} GPU <pci> elements: not one machine's topology")
    return gpus


def _class_nics(root: ET.Element, parent: dict, chains: list) -> tuple[Nic, ...]:
    """The ``<pci>`` elements of a NIC class that hold no ``<nic>``, in file order: one port each,
    named ``ib-BUSID`` / ``eth-BUSID`` (``ib-K`` when the bus id is missing), speed not stated."""
    found = []
    for el in root.iter("pci"):
        kind = NIC_CLASSES.get(_pci_class(el))
        if kind is None or el.find(".//nic") is not None:
            continue
        name = f"{kind}-{_show(el.get('busid')) if el.get('busid') else len(found)}"
        levels = tuple(_level(_chain(el, parent), chain) for chain in chains)
        found.append(Nic(name, levels, where=_describe(el)))
    return tuple(found)


def _find_gpus(root: ET.Element, parent: dict, where: str) -> list[_Gpu]:
    gpus, by_dev, by_busid = [], {}, {}
    for el in root.iter("gpu"):
        pci = parent.get(el)
        if pci is None or pci.tag != "pci":
            raise InputError(f"{where}: {_describe(el)} is not inside a <pci> element")
        if el.get("dev") is None:
            raise InputError(f"{where}: <gpu> under {_describe(pci)} has no dev attribute")
        dev = _int(el.get("dev"), "dev", f"{where}: <gpu> under {_describe(pci)}")
        if dev in by_dev:
            hosts = {cpu.get("host_hash") for cpu in root.iter("cpu")} - {None}
            why = f" (the file holds {len(hosts)} hosts' host_hash values)" if len(hosts) > 1 else ""
            raise InputError(f"{where}: two <gpu dev={dev}> elements{why}")
        busid = _busid(pci.get("busid")) if pci.get("busid") else None
        if busid is not None and busid in by_busid:
            raise InputError(f"{where}: <gpu dev={by_busid[busid]}> and <gpu dev={dev}> share {_describe(pci)}")
        by_dev[dev] = _Gpu(dev, el, pci, busid, f"<gpu dev={dev}>")
        if busid is not None:
            by_busid[busid] = dev
        gpus.append(by_dev[dev])
        if len(gpus) > MAX_GPUS:
            raise InputError(f"{where}: more than {MAX_GPUS} <gpu> elements: not one machine's topology")
    return sorted(gpus, key=lambda g: g.dev)


def _links(gpus: list[_Gpu], root: ET.Element, where: str, notes: list[str]):
    """Per GPU its NVSwitch links, and per GPU pair (i < j) its (kind, links, where)."""
    index = {g.busid: i for i, g in enumerate(gpus) if g.busid is not None}
    pci_class = {_busid(el.get("busid")): _hex(el.get("class")) for el in root.iter("pci") if el.get("busid")}
    switch = [0] * len(gpus)
    sides: dict[tuple[int, int], dict[int, list]] = {}
    for i, gpu in enumerate(gpus):
        links = [el for el in gpu.el if el.tag in LINK_KINDS]
        for el in sorted(links, key=lambda el: (el.tag, _busid(el.get("target", "")), el.get("count", ""))):
            here = f"<gpu dev={gpu.dev}> <{el.tag} target={_show(el.get('target'))}>"
            if el.get("target") is None or el.get("count") is None:
                missing = "target" if el.get("target") is None else "count"
                raise InputError(f"{where}: <gpu dev={gpu.dev}> has an <{el.tag}> without a {missing} attribute")
            count = _int(el.get("count"), "count", f"{where}: {here}")
            target = _busid(el.get("target"))
            j = index.get(target)
            if count == 0:
                notes.append(f"{here} has count 0: ignored")
            elif j == i:
                notes.append(f"{here} names the GPU's own bus id: ignored (it does not say which GPU it reaches)")
            elif j is not None:
                pair = sides.setdefault((min(i, j), max(i, j)), {})
                entry = pair.setdefault(int(i > j), [LINK_KINDS[el.tag], 0, here])
                entry[1] += count
            elif NVSWITCH_CLASS in (_hex(el.get("tclass")), pci_class.get(target)):
                switch[i] += count
            else:
                notes.append(f"{here} reaches no GPU or NVSwitch in the file: ignored")
    linked = {}
    for (i, j), by_side in sorted(sides.items()):
        kind, count, here = by_side.get(0) or by_side[1]
        if len(by_side) == 2 and by_side[0][1] != by_side[1][1]:
            count = max(by_side[0][1], by_side[1][1])
            notes.append(f"{by_side[0][2]} says {by_side[0][1]} links, {by_side[1][2]} says "
                         f"{by_side[1][1]}: kept {count}")
        linked[(i, j)] = (kind, count, here)
    return switch, linked


def _nics(root: ET.Element, parent: dict, chains: list, where: str, notes: list[str]) -> tuple[Nic, ...]:
    found = []
    for order, nic in enumerate(root.iter("nic")):
        holder = parent.get(nic, nic)
        nets = [el for el in nic if el.tag == "net"]
        if not nets:
            notes.append(f"a <nic> under {_describe(holder)} holds no <net>: ignored")
            continue
        keyed = sorted((_net_dev(net, where), k, net) for k, net in enumerate(nets))
        dev, first = keyed[0][0], keyed[0][2]
        name = _show(first.get("name") or f"nic{order}")
        endpoint = holder if holder.tag == "pci" else nic
        levels = tuple(_level(_chain(endpoint, parent), chain) for chain in chains)
        nic_ = Nic(name, levels, gbps=_gbps(first, name, where), ports=len(nets), where=f"<nic> <net name={name}>")
        found.append((dev, order, nic_))
    return tuple(nic_ for _, _, nic_ in sorted(found, key=lambda t: t[:2]))


def _net_dev(net: ET.Element, where: str) -> int:
    value = net.get("dev")
    return MAX_INT + 1 if value is None else _int(value, "dev", f"{where}: {_describe(net)}")


def _gbps(net: ET.Element, name: str, where: str) -> float | None:
    value = (net.get("speed") or "").strip()
    if not value:
        return None
    if not re.fullmatch(r"\d{1,10}(\.\d{1,6})?", value):
        raise InputError(f'{where}: <net name={name}> speed="{_show(value)}" is not a speed in Mb/s')
    return float(value) / 1000 or None


def _numa(chain: list[ET.Element], where: str) -> int | None:
    cpu = next((el for el in chain if el.tag == "cpu"), None)
    if cpu is None or not (cpu.get("numaid") or "").strip():
        return None
    numa = _int(cpu.get("numaid"), "numaid", f"{where}: <cpu>", low=-MAX_INT)
    return numa if numa >= 0 else None


def _gen(value: str | None) -> int | None:
    match = re.match(r"\s*(\d{1,3}(?:\.\d{1,3})?)\s*(GT/s|$)", value or "")
    return GT_TO_GEN.get(float(match.group(1))) if match else None


def _width(value: str | None) -> int | None:
    match = re.fullmatch(r"\s*(\d{1,3})\s*", value or "")
    return int(match.group(1)) or None if match else None


def _model_of(gpu: _Gpu) -> str | None:
    for key in ("arch", "gcn"):  # RCCL: a gfx name when it writes one (older RCCL: numbers)
        value = (gpu.el.get(key) or "").strip().lower()
        if value.startswith("gfx"):
            return _show(value.split(":")[0])
    if (gpu.el.get("gcn") or "").strip():
        return f"gcn:{_show(gpu.el.get('gcn')).lower()}"
    return _pci_id(gpu.pci)


def _pci_id(pci: ET.Element) -> str | None:
    """"vendor:device" as lower-case hex ("10de:2330"), None when the file leaves one out or writes
    0x0000 (curated files' placeholder)."""
    vendor, device = _hex(pci.get("vendor")), _hex(pci.get("device"))
    return f"{vendor:04x}:{device:04x}" if vendor and device else None


def _model(gpus: list[_Gpu], notes: list[str]) -> str | None:
    models = [_model_of(g) for g in gpus]
    if len(set(models)) > 1:
        notes.append(f"GPUs name different models ({', '.join(sorted(set(map(str, models))))}): "
                     f"kept GPU 0's ({models[0]})")
    return models[0]


def _summary(root: ET.Element, gpus: list[_Gpu], model, nics, switch: list[int], linked: dict,
             class_only: bool) -> str:
    rccl = any(g.el.get("gcn") is not None for g in gpus) or any(k == "xgmi" for k, _, _ in linked.values())
    pci_id = _pci_id(gpus[0].pci)
    shown = model if model == pci_id or pci_id is None else f"{model}, PCI id {pci_id}"
    listed = " by PCI class only" if class_only else ""
    parts = [f"{len(gpus)} GPUs{listed} ({shown or 'model not stated'})",
             f"{len(nics)} NIC{'' if len(nics) == 1 else 's'}"]
    if any(switch):
        per = str(switch[0]) if len(set(switch)) == 1 else "/".join(map(str, switch))
        parts.append(f"{per} NVSwitch links per GPU")
    for kind, label in (("nvlink", "NVLink"), ("xgmi", "xGMI")):
        count = sum(1 for k, _, _ in linked.values() if k == kind)
        if count:
            parts.append(f"{count} GPU pairs with {label}")
    version = _show(root.get("version", "?"), 10)
    return f"{'RCCL' if rccl else 'NCCL'} topology XML (system version {version}): " + ", ".join(parts)
