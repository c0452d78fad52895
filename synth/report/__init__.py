"""Pareto-frontier reports: candidates -> evaluation over sizes -> tables, plots, selection."""
