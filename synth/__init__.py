"""synth: collective-communication schedule synthesizer.

The public Python API, imported on first use (PEP 562), so ``import synth`` itself loads nothing
heavy (no numpy, networkx, pulp or z3)::

    import synth

    topo = synth.resolve_topology("dgx1")
    coll = synth.make_collective("allgather", topo.ranks)
    schedule = synth.load_schedule("allgather.json")
    assert synth.verify.verify(schedule) == []
    print(synth.format_size(1 << 20), synth.step_time_us(schedule, synth.parse_size("1M")))

Model types: Topology, Link, Group, Nic, Collective, Schedule, Step, Send. The verifier: the
submodule ``synth.verify`` (``synth.verify.verify(schedule)``: a list of violations, empty when the
schedule is valid; ``synth.verify.is_valid``). Bounds: ``lower_bounds``. Cost:
``step_time_us``, ``simulate_us``, ``parse_size``, ``format_size``. The library: ``resolve_topology``,
``make_collective``. Files: ``load_schedule``, ``save_schedule``, ``load_topology_file``,
``schedule_from_doc``, ``read_json``. Errors: ``SynthError`` and its kinds. The synthesizer
registry: the submodule ``synth.synthesizers``.
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

# public name -> the module that defines it; imported when the name is first read
_HOMES = {
    # model types
    "Topology": "synth.core.topology",
    "Link": "synth.core.topology",
    "Group": "synth.core.topology",
    "Nic": "synth.core.topology",
    "Collective": "synth.core.collective",
    "Schedule": "synth.core.schedule",
    "Step": "synth.core.schedule",
    "Send": "synth.core.schedule",
    # verifier (the function is synth.verify.verify: synth.verify is its module)
    "Violation": "synth.verify",
    # bounds
    "lower_bounds": "synth.bounds.lower_bounds",
    "Bounds": "synth.bounds.lower_bounds",
    # cost model
    "step_time_us": "synth.cost",
    "simulate_us": "synth.cost",
    "parse_size": "synth.cost",
    "format_size": "synth.cost",
    # library resolution
    "resolve_topology": "synth.core.library",
    "make_collective": "synth.core.collectives",
    # files
    "load_schedule": "synth.verify",
    "save_schedule": "synth.core.io",
    "schedule_from_doc": "synth.verify",
    "load_topology_file": "synth.core.io",
    "read_json": "synth.core.io",
    # errors
    "SynthError": "synth.core.errors",
    "InputError": "synth.core.errors",
    "InvalidScheduleError": "synth.core.errors",
    "InfeasibleError": "synth.core.errors",
    "UnknownResultError": "synth.core.errors",
    "SolverError": "synth.core.errors",
    "SynthesisBug": "synth.core.errors",
}

# submodules offered as attributes of the package (imported on first use)
_SUBMODULES = ("synthesizers", "verify")

__all__ = ["__version__", *_HOMES, *_SUBMODULES]


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(import_module(home), name)
        globals()[name] = value  # the next read does not come here
        return value
    if name in _SUBMODULES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
