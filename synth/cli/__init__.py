"""The command line: argument parsing only, one module per command group; ``main(argv) -> int``."""
