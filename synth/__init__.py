"""synth: collective-communication schedule synthesizer.

Core types: Topology, Collective, Schedule; ``verify`` replays a schedule independently.
"""

__version__ = "0.1.0"
