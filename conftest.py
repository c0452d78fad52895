"""Collection rules for the whole tree: synth.runtime needs torch (the ``torch`` extra); without it
the modules that import torch are not imported for doctests (tests/runtime skip themselves)."""

import importlib.util

TORCH_MODULES = ["api", "buffers", "data", "executor", "launcher", "measure", "transport"]
collect_ignore = [] if importlib.util.find_spec("torch") else [f"synth/runtime/{m}.py" for m in TORCH_MODULES]
