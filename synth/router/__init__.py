"""MILP router stages: routing, ordering, timing."""
