"""SAT engines under the SMT encodings, their choice, and checked proofs of infeasibility.

The names live here, free of imports, so the command line can offer them without loading an
engine."""

ENGINES = ("z3", "cadical", "kissat")
PROOF_ENGINES = ("cadical", "kissat")  # the engines that write DRAT proofs
AUTO = "auto"
CHOICES = (AUTO, *ENGINES)
