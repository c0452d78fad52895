"""Importers: what tools on a real machine print (nvidia-smi, NCCL's topology dump, rocm-smi) ->
a MachineDescription (synth.importers.machine) -> a synth.topology (synth.importers.build)."""
