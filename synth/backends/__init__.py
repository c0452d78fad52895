"""Solver backends. Solver objects (z3 terms, PuLP variables) never leave this package."""
