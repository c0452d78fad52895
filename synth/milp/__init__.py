"""TACCL-style router: sketches, the PuLP solver layer, routing MILP, ordering, timing, the exact stage."""
