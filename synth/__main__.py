import sys

from synth.cli.main import main

sys.exit(main())
