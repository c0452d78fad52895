"""The model: topologies, collectives, schedules, the machine library and generators, symmetry, duals, errors, files."""
