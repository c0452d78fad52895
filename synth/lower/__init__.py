"""Lowering: Schedule -> Program (buffers, values and transfers, thread blocks and dependencies)."""
