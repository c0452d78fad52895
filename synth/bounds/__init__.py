"""Lower bounds: steps (hop distances), rounds per step count (time-expanded LP), bandwidth (flow LP, cuts)."""
