"""The README's "your own machine" block, run as printed on a 4-GPU PCIe box: import, solve,
report, each synthesized schedule verified and at least as fast as NCCL's ring in the model."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from synth.cli.main import main
from synth.verify import load_schedule, verify
from tests.report_checks import assert_at_least_ncclS_ring, assert_verified_synthesized

ROOT = Path(__file__).resolve().parents[1]

# Two GPUs under one PCIe switch on each of two CPUs (written for this test).
PCIE_BOX = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPIX\tSYS\tSYS\t0-31\t0
GPU1\tPIX\t X \tSYS\tSYS\t0-31\t0
GPU2\tSYS\tSYS\t X \tPIX\t32-63\t1
GPU3\tSYS\tSYS\tPIX\t X \t32-63\t1

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes
  PIX  = Connection traversing at most a single PCIe bridge
"""


def readme_machine_block() -> list[str]:
    """The commands of the README's sh block under "Your own machine"."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own machine"):]
    block = re.search(r"```sh\n(.*?)```", section, re.DOTALL).group(1)
    return [line for line in block.splitlines() if line.strip()]


def test_the_readme_machine_block_runs_on_a_pcie_box(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    lines = readme_machine_block()
    assert lines[0] == "nvidia-smi topo -m > mybox.txt"
    Path("mybox.txt").write_text(PCIE_BOX)
    for line in lines[1:]:
        for command in line.split("&&"):
            argv = shlex.split(command)
            assert argv[0] == "synth"
            assert main(argv[1:]) == 0, f"{command.strip()}: {capsys.readouterr().err[-400:]}"
    solved = load_schedule("ar.json")
    assert verify(solved) == []
    report = json.loads(Path("report-mybox/report.json").read_text())
    assert_verified_synthesized(report, Path("report-mybox"))
    assert_at_least_ncclS_ring(report)
