"""The Program IR (thread blocks per rank, MSCCL ops) and its data-level replay checker."""
