import sys

from synth.cli.main import main

if __name__ == "__main__":  # guarded: synth run's worker processes import this module
    sys.exit(main())
