"""Pipelined greedy scheduler for machines too big for exact search."""
