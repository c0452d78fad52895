"""MSCCL++ execution plans (JSON): read them (the current schema of mscclpp >= 0.8 and the legacy one
of 0.5-0.7), check them against the executor's rules, and replay them at the data level.

- ``plan``: the plan model and the reader (``read_plan``), every problem named by its JSON path;
- ``rules``: what the executor needs to load and run a plan (shared/reference/mscclpp-format.md,
  section 17: R2-R19);
- ``replay``: every rank's thread blocks run against each other with the plan's own synchronisation
  (signals and waits in channel order, semaphores, barriers, LL packets, ``nop`` inside a block):
  deadlocks, reads of data not yet written, races between blocks, and the final state against the
  declared collective (R20-R24).
"""
