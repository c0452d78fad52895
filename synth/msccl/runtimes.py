"""The MSCCL runtimes synth writes and checks algorithm files for, by name: one
``synth.msccl.profiles.Profile`` each (the names alone, so a parser can offer them without loading
the profiles)."""

RUNTIMES = ("legacy", "executor", "rccl")
