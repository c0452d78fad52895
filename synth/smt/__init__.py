"""SCCL-style synthesis with z3: the SAT encoding, cardinality clauses, sessions, least-steps, the Pareto sweep."""
