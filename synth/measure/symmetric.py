"""NCCL 2.27-2.30's symmetric-memory kernels: when NCCL runs one, which one it picks, and what it takes.

NCCL decides this before its tuner is asked (reference/nccl-symmetric.md sections 1-2), so a
call that may run a symmetric kernel never reaches the ring / tree / NVLS comparison.

**When** (``eligible``): NVIDIA's library at version 2.27 or later; allreduce, allgather or
reduce-scatter; one NVLink domain (a machine, or an MNNVL rack: NCCL's LSA team; across domains
only the GIN allgather / reduce-scatter kernels exist, which this model does not cover, so such
calls stay on the classic algorithms); every GPU pair joined directly by NVLink (a link or an
NVLink switch: 2.29.2's rule, which every NVSwitch machine meets); and buffers that let it:

- ``symmetric`` (nccl-tests ``-R 2``, a registered window): every kernel;
- ``none`` / ``local`` (``-R 0`` / ``-R 1``): only with NCCL_SYM_NOWIN_ENABLE=1 (2.29.2+), only
  the LL kernels, only when the classic choice would itself be protocol LL, and not with several
  GPUs per process (``-g N``);

the multicast kernels (``*MC``) also need NVLS (a switch that reduces and multicasts across the
domain, more than 2 ranks, NCCL_NVLS_ENABLE not 0). LL kernels are dropped from 2 GiB of bus bytes
(the buffer for allreduce, the output otherwise) and every kernel from 64 GiB.

**Which** (``pick``): NCCL's own cost model with its constants (sym_kernels.cc): per kernel,
t = L + softplus(B/BW - 1 us), BW = softmin(CTAs x smBw x m, peak), bus bytes B and multiplier m
as ``KERNELS`` lists; per kernel the fewest CTAs within 2.5% of the time at the most (64; ceil(16/n) on Hopper and
ceil(32/n) on Blackwell for the multicast load/store kernels, a cap that reproduces the crossovers
the reference gives: Hopper allreduce LLMC -> LDMC at 32 KiB, Blackwell at 64 KiB); the kernel
with the least t x (1 + 0.025 CTAs).

**What it takes** (``kernel_us``): not NCCL's estimate (its Blackwell constants are 3x what B200
measures) but the hardware's, with the calibration's terms: ``latency + size / algbw`` where
latency is the kernel class's (``sym_ll_us`` one-shot LL, ``sym_ldst_us`` two barriers around
peer loads and stores, ``sym_mc_us`` two multicast barriers) and algbw the busiest GPU port's:

- LL kernels move each byte with a flag beside it (half the port: LL's share): a rank receives
  (n-1) slots (allreduce: n-1 buffers, allgather / reduce-scatter: (n-1)/n of the buffer);
- load/store kernels move at ``efficiency_ldst`` of the NVLink port (SM loads and stores over
  NVLink, below the copy engines' and NCCL's Simple rate): two-shot allreduce 2(n-1)/n of the
  buffer each way, allgather / reduce-scatter (n-1)/n;
- multicast kernels run through the switch exactly as NVLS does (``runtime.switch_port_gbps``):
  one capability, one formula.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

KB, GIB = 1024, float(1 << 30)
LL_LIMIT = 2 * GIB  # LL kernels only below this many bus bytes
ANY_LIMIT = 64 * GIB
CTA_TOLERANCE = 0.025
CTA_PENALTY = 0.025
MAX_CTAS = 64
FIRST_VERSION = (2, 27, 0)
NOWIN_VERSION = (2, 29, 2)
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter")


@dataclass(frozen=True)
class Kernel:
    """One symmetric kernel: NCCL's name, its collective, its class (``ll``, ``ldst``, ``mc``:
    which latency and which rate), whether it multicasts, and NCCL's bus-bytes rule (``bus``:
    ``9n`` x S, ``2(n-1)/n`` x S, ``(n-1)`` x S or ``1+1/n`` x S, S the buffer for allreduce and one
    rank's slice otherwise) with its bandwidth multiplier (``m``: a number, or ``n`` / ``0.55n``)."""

    name: str
    collective: str
    kind: str
    multicast: bool
    bus: str
    m: str

    def bus_bytes(self, slice_bytes: float, n: int) -> float:
        factor = {"9n": 9 * n, "2(n-1)/n": 2 * (n - 1) / n, "n-1": n - 1, "1+1/n": 1 + 1 / n}[self.bus]
        return factor * slice_bytes

    def multiplier(self, n: int) -> float:
        return {"n": n, "0.55n": 0.55 * n}.get(self.m) or float(self.m)


KERNELS = (
    Kernel("AllReduce_AGxLL_R", "allreduce", "ll", False, "9n", "1"),
    Kernel("AllReduce_AGxLLMC_R", "allreduce", "ll", True, "9n", "1.1"),
    Kernel("AllReduce_RSxLD_AGxST", "allreduce", "ldst", False, "2(n-1)/n", "1"),
    Kernel("AllReduce_RSxLDMC_AGxSTMC", "allreduce", "mc", True, "1+1/n", "n"),
    Kernel("AllGather_LL", "allgather", "ll", False, "9n", "1"),
    Kernel("AllGather_LLMC", "allgather", "ll", True, "9n", "1.1"),
    Kernel("AllGather_ST", "allgather", "ldst", False, "n-1", "1"),
    Kernel("AllGather_STMC", "allgather", "mc", True, "n-1", "0.55n"),
    Kernel("ReduceScatter_LL", "reduce_scatter", "ll", False, "9n", "1"),
    Kernel("ReduceScatter_LD", "reduce_scatter", "ldst", False, "n-1", "1"),
    Kernel("ReduceScatter_LDMC", "reduce_scatter", "mc", True, "n-1", "0.55n"),
)


@dataclass(frozen=True)
class Constants:
    """NCCL's symmetric cost-model constants for one GPU generation (us, "GB/s" = GiB/s)."""

    ll_us: dict
    other_us: dict
    sm_gbps: dict
    peak: dict
    mc_ctas: int  # multicast kernels: at most ceil(mc_ctas / n) CTAs


HOPPER = Constants({"any": 4.5}, {"any": 7.8}, {"allreduce": 65.0, "any": 44.0},
                   {"AllReduce_RSxLDMC_AGxSTMC": 480.0, "any": 320.0}, 16)
BLACKWELL = Constants({"allgather": 8.5, "any": 11.0}, {"allreduce": 19.5, "any": 13.0}, {"any": 55.0},
                      {"AllReduce_RSxLDMC_AGxSTMC": 1000.0, "any": 600.0}, 32)


def _of(table: dict, key: str) -> float:
    return table.get(key, table["any"])


@dataclass(frozen=True)
class Pick:
    """NCCL's choice: the kernel and its CTAs, and NCCL's own estimate of its time (us)."""

    kernel: Kernel
    ctas: int
    nccl_us: float


def version_tuple(text: str | None) -> tuple[int, int, int] | None:
    """``"nccl 2.30.4"`` / ``"2.28"`` as (2, 30, 4) / (2, 28, 0); None for RCCL or no version."""
    if not text or text.startswith("rccl"):
        return None
    parts = text.removeprefix("nccl").strip().split(".")
    numbers = [int(p) for p in parts if p.isdigit()]
    return tuple((numbers + [0, 0, 0])[:3]) if len(numbers) >= 2 else None


@dataclass(frozen=True)
class Setup:
    """How a run's buffers were set up and which NCCL ran it: ``registration`` none / local /
    symmetric (nccl-tests -R 0/1/2), ``nowin`` NCCL_SYM_NOWIN_ENABLE=1, ``version`` (None: the
    calibration's), ``cta_policy_zero`` NCCL_CTA_POLICY=ZERO (copy-engine collectives)."""

    registration: str = "none"
    nowin: bool = False
    version: tuple[int, int, int] | None = None
    cta_policy_zero: bool = False


def eligible(machine, collective: str, setup: Setup, version: tuple[int, int, int], nvls_allowed: bool,
             gpus_per_process: int = 1) -> tuple[Kernel, ...]:
    """The kernels NCCL may run for ``collective`` on ``machine`` (a ``runtime.Machine``) with
    these buffers (the module's rules; the LL-only NOWIN path is decided by the caller, which
    knows the classic choice); () when the call takes the classic path."""
    if machine.vendor != "nccl" or version < FIRST_VERSION or collective not in COLLECTIVES:
        return ()
    if machine.ranks < 2 or not machine.direct or max(machine.nvls_domains, machine.machines) > 1:
        return ()
    registered = setup.registration == "symmetric"
    if not registered and not (setup.nowin and version >= NOWIN_VERSION and gpus_per_process == 1):
        return ()
    multicast = nvls_allowed and machine.nvls_domains == 1 and machine.ranks > 2
    return tuple(k for k in KERNELS if k.collective == collective and (registered or k.kind == "ll")
                 and (multicast or not k.multicast))


def before_tuner(machine, collective: str, setup: Setup, version: tuple[int, int, int],
                 nvls_allowed: bool = True) -> int:
    """Bytes (NCCL's nBytes) below which NCCL takes every call of ``collective`` on ``machine`` with
    a symmetric kernel, never asking its tuner: 64 GiB of bus bytes with a registered window where
    the kernels apply (allreduce's bus bytes are its buffer, the others' their whole buffer), else
    0. NOWIN's LL kernels are not counted: they follow the tuner's own protocol pick."""
    if setup.registration != "symmetric" or not eligible(machine, collective, setup, version, nvls_allowed):
        return 0
    return int(ANY_LIMIT)


def pick(kernels: tuple[Kernel, ...], size: float, n: int, arch: str | None) -> Pick | None:
    """NCCL's choice among ``kernels`` for a call of ``size`` bytes (nccl-tests' size) on ``n``
    ranks: its cost model and constants (module docstring); None when the size masks them all."""
    constants = BLACKWELL if arch == "blackwell" else HOPPER
    best: Pick | None = None
    for kernel in kernels:
        slice_bytes = size if kernel.collective == "allreduce" else size / n
        bus = slice_bytes if kernel.collective == "allreduce" else n * slice_bytes
        if bus >= ANY_LIMIT or (kernel.kind == "ll" and bus >= LL_LIMIT):
            continue
        ctas, took = _ctas(kernel, _cells(slice_bytes), n, constants)
        if best is None or took * (1 + CTA_PENALTY * ctas) < best.nccl_us * (1 + CTA_PENALTY * best.ctas):
            best = Pick(kernel, ctas, took)
    return best


def _cells(slice_bytes: float) -> float:
    """NCCL rounds counts up to 1 KiB cells."""
    return math.ceil(slice_bytes / KB) * KB


def _ctas(kernel: Kernel, slice_bytes: float, n: int, c: Constants) -> tuple[int, float]:
    """(CTAs, NCCL's time): the fewest CTAs whose time is within 2.5% of the time at the most."""
    most = min(MAX_CTAS, math.ceil(c.mc_ctas / n)) if kernel.multicast and kernel.kind != "ll" else MAX_CTAS
    at_most = _nccl_us(kernel, slice_bytes, n, most, c)
    for ctas in range(1, most + 1):
        took = _nccl_us(kernel, slice_bytes, n, ctas, c)
        if took <= at_most * (1 + CTA_TOLERANCE):
            return ctas, took
    return most, at_most


def _nccl_us(kernel: Kernel, slice_bytes: float, n: int, ctas: int, c: Constants) -> float:
    """NCCL's estimate: L + softplus(B/BW - 1), BW = softmin(CTAs x smBw x m, peak), softness smBw."""
    latency = _of(c.ll_us if kernel.kind == "ll" else c.other_us, kernel.collective)
    sm = _of(c.sm_gbps, kernel.collective)
    peak = _of(c.peak, kernel.name)
    reach = ctas * sm * kernel.multiplier(n)
    bandwidth = -sm * math.log(math.exp(-reach / sm) + math.exp(-peak / sm))  # smooth min
    x = kernel.bus_bytes(slice_bytes, n) / (bandwidth * GIB) * 1e6 - 1.0
    return latency + (x if x > 30 else math.log1p(math.exp(x)))


def kernel_algbw(kernel: Kernel, n: int, nvlink_gbps: float, ldst_gbps: float, switch_algbw: float) -> float:
    """The kernel's algorithm bandwidth (GB/s) at the busiest port (module docstring): ``nvlink_gbps``
    a GPU's NVLink port at its bulk efficiency, ``ldst_gbps`` at the load/store efficiency,
    ``switch_algbw`` what NVLS reaches for this collective through the switch."""
    share = {"allreduce": 1 / (n - 1)}.get(kernel.collective, n / (n - 1))  # buffer per byte a port takes in
    if kernel.kind == "ll":
        port = switch_algbw * (n + 1) / n if kernel.multicast and kernel.collective == "allreduce" else \
            (switch_algbw if kernel.multicast else nvlink_gbps)
        return 0.5 * port * share
    if kernel.kind == "ldst":
        return ldst_gbps * (n / (2 * (n - 1)) if kernel.collective == "allreduce" else n / (n - 1))
    return switch_algbw
