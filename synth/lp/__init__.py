"""Linear and integer programs: the one solver layer (PuLP with HiGHS or CBC, status table) and
sparse LPs through HiGHS, shared by the MILP router and the bounds."""
