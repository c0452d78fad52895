"""``synth topo show`` and ``synth topo list`` with switches (topology v2): what each switch can
do, its ports, per-port terms, kind and the groups its ports share, in text and JSON; and a bad
switch in a topology file as one line naming the field and value, exit 2, no traceback."""

from __future__ import annotations

import copy
import json

import pytest

from synth.core.library import list_topologies, resolve_topology
from synth.core.topology import Topology
from tests.cli_run import run


def switch_lines(out: str) -> list[str]:
    """The lines under the 'switches (...)' heading."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("switches ("))
    return [line for line in lines[start + 1:] if line.startswith("  ")]


def test_show_h100_lists_its_nvswitch(capsys):
    code, out, _ = run(capsys, "topo", "show", "h100")
    assert code == 0 and "1 switch (reduce + multicast)" in out.splitlines()[0]
    (line,) = switch_lines(out)
    for part in ("nvswitch:", "8 ports (ranks 0-7)", "450 GB/s", "alpha 0.7 us", "cap 1 per port",
                 "; reduce + multicast;", "kind nvlink", "port groups gpuN-out / gpuN-in (one per port)"):
        assert part in line, line
    heading = next(line for line in out.splitlines() if line.startswith("switches ("))
    assert all(name in heading for name in ("reduce:", "multicast:", "reduce_multicast:"))


def test_show_h100x16_sharp_groups_the_copies_and_shows_the_fabric_switch(capsys):
    code, out, _ = run(capsys, "topo", "show", "h100x16+sharp")
    assert code == 0 and "17 switches (reduce + multicast; reduce_multicast)" in out.splitlines()[0]
    copies, sharp = switch_lines(out)
    assert copies.startswith("  16 switches m0-nvswitch .. m15-nvswitch: 8 ports each (ranks 0-127 together)")
    assert "reduce + multicast" in copies and "mN-gpuN-out / mN-gpuN-in" in copies
    assert sharp.startswith("  sharp: 128 ports (ranks 0-127), 50 GB/s, alpha 2 us")
    assert "; reduce_multicast;" in sharp and "kind net" in sharp and "mN-nicN-out / mN-nicN-in (one per port)" in sharp


def test_show_a_shared_nic_port_and_ports_without_groups(capsys, tmp_path):
    code, out, _ = run(capsys, "topo", "show", "ndv2x2+sharp")
    assert code == 0 and "(2 for 16 ports)" in switch_lines(out)[0]  # one NIC per machine behind 8 ports
    doc = resolve_topology("h100").to_dict()
    doc["switches"][0].update(ranks=[0, 2, 5], out_groups=["gpu0-out", None, "gpu5-out"], in_groups=None,
                              reduce=False, multicast=False, reduce_multicast=True, kind=None)
    path = tmp_path / "partial.json"
    path.write_text(json.dumps(doc))
    code, out, _ = run(capsys, "topo", "show", str(path))
    (line,) = switch_lines(out)
    assert code == 0 and "3 ports (ranks 0,2,5)" in line and "kind not given" in line
    assert "port groups out gpuN-out (one per port; 1 port without), in none" in line


def test_show_without_switches_says_nothing_of_them(capsys):
    code, out, _ = run(capsys, "topo", "show", "dgx1")
    assert code == 0 and "switch" not in out.splitlines()[0] and "switches (" not in out


@pytest.mark.parametrize("spec, version", [("h100", 2), ("h100x2+sharp", 2), ("a100", 1), ("dgx1", 1)])
def test_show_json_is_the_document_and_reads_back(capsys, tmp_path, spec, version):
    code, out, _ = run(capsys, "topo", "show", spec, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["version"] == version and ("switches" in doc) == (version == 2)
    assert Topology.from_dict(doc) == resolve_topology(spec)
    path = tmp_path / "again.json"
    path.write_text(out)
    code, again, _ = run(capsys, "topo", "show", str(path), "--json")
    assert code == 0 and json.loads(again) == doc


def test_list_names_what_each_library_switch_can_do_one_line_each(capsys, monkeypatch):
    code, out, _ = run(capsys, "topo", "list")
    lines = out.splitlines()
    assert code == 0 and len(lines) == len(list_topologies()) + 1
    (h100,) = [line for line in lines if line.startswith("h100 ")]
    assert "reduce + multicast" in h100 and "; switch nvswitch" not in h100  # the description says it already
    from synth.core import library

    monkeypatch.setitem(library._DESCRIPTIONS, "h100", "DGX/HGX H100, 8 GPUs behind NVSwitch")
    code, out, _ = run(capsys, "topo", "list")
    (h100,) = [line for line in out.splitlines() if line.startswith("h100 ")]
    assert h100.endswith("DGX/HGX H100, 8 GPUs behind NVSwitch; switch nvswitch: reduce + multicast")
    assert len(out.splitlines()) == len(lines)


# ---------------------------------------------------------------- bad switches in a file

def _rank_out_of_range(switch, doc):
    switch["ranks"][-1] = 8


def _rank_twice(switch, doc):
    switch["ranks"][-1] = 6


def _reduce_one(switch, doc):
    switch["reduce"] = 1


def _multicast_text(switch, doc):
    switch["multicast"] = "yes"


def _out_groups_short(switch, doc):
    switch["out_groups"] = switch["out_groups"][:7]


def _in_groups_unknown(switch, doc):
    switch["in_groups"][3] = "gpu9-in"


def _version_1(switch, doc):
    doc["version"] = 1


BAD = {  # edit, what the one line must hold (the field and the value)
    "rank out of range": (_rank_out_of_range, ("switch 'nvswitch'", "'ranks' names 8", "out of range 0..7")),
    "rank twice": (_rank_twice, ("switch 'nvswitch'", "rank 6", "twice", "'ranks'")),
    "reduce not a boolean": (_reduce_one, ("switch 'nvswitch'", "'reduce'", "true or false", "got 1")),
    "multicast not a boolean": (_multicast_text, ("'multicast'", "true or false", '"yes"')),
    "out_groups of the wrong length": (_out_groups_short, ("'out_groups'", "7 entries", "8 ports")),
    "in_groups naming an unknown group": (_in_groups_unknown, ("'in_groups'", "'gpu9-in'", "not a group")),
    "switches in a version 1 document": (_version_1, ("'switches'", "version 2", "version 1")),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_switch_is_one_line_naming_the_field_and_value(capsys, tmp_path, case):
    edit, must = BAD[case]
    doc = copy.deepcopy(resolve_topology("h100").to_dict())
    edit(doc["switches"][0], doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "topo", "show", str(path))
    assert code == 2 and out == "" and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and str(path) in err, err
    for part in must:
        assert part in err, err


def test_show_says_which_fabric_a_composition_got(capsys):
    """gb200nvl72x20's full mesh would pass MAX_LINKS, so its NICs are rail-aligned; h100x2 keeps
    the full mesh."""
    code, out, _ = run(capsys, "topo", "show", "gb200nvl72x20")
    assert code == 0
    assert out.splitlines()[0].startswith("gb200nvl72x20: 1440 ranks, 129600 directed links")
    assert "source: composed: 20 copies of gb200nvl72 joined by a rail-aligned fabric" in out
    code, out, _ = run(capsys, "topo", "show", "h100x2")
    assert "source: composed: 2 copies of h100 joined by a non-blocking fabric through their NICs;" in out
