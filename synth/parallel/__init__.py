"""Independent jobs (reports, sweep points) run side by side: a local process pool (synth.parallel.pool)."""
