"""``synth topo detect``: run the topology tools present on this machine and import what they print.

Tries ``nvidia-smi topo -m`` then ``rocm-smi --showtopo`` (each with a time limit); the first that
runs and prints something an importer reads wins. NCCL's XML dump is not a command (set
``NCCL_TOPO_DUMP_FILE`` in a job, then ``synth topo import`` the file).
"""

from __future__ import annotations

import shutil
import subprocess

from synth.core.errors import InputError

COMMANDS = (("nvidia-smi", ("nvidia-smi", "topo", "-m")), ("rocm-smi", ("rocm-smi", "--showtopo")))


def detect_text(timeout: float = 30.0) -> tuple[str, str, str]:
    """(format, command line, its output) of the first tool present that prints a topology."""
    tried = []
    for fmt, argv in COMMANDS:
        exe = shutil.which(argv[0])
        if exe is None:
            tried.append(f"{argv[0]}: not found")
            continue
        try:
            done = subprocess.run([exe, *argv[1:]], capture_output=True, text=True, timeout=timeout)
        except (OSError, subprocess.TimeoutExpired) as exc:
            tried.append(f"{' '.join(argv)}: {type(exc).__name__}")
            continue
        if done.returncode != 0 or not done.stdout.strip():
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            tried.append(f"{' '.join(argv)}: exit {done.returncode} ({first[:80]})")
            continue
        return fmt, " ".join(argv), done.stdout
    raise InputError("no topology tool on this machine printed a topology (" + "; ".join(tried) + "); run "
                     "nvidia-smi topo -m or rocm-smi --showtopo where the GPUs are and 'synth topo import' the output")
