"""Running programs for real: torch.distributed executes synth schedules, programs and MSCCL XML.

``synth.runtime.load(path)`` returns a ScheduledCollective whose methods are named and called like
torch.distributed's collectives (synth.runtime.api); ``synth run`` (synth.cli.run) runs a file on
real processes and checks it against torch. Needs torch (the ``torch`` extra); importing this
package does not.
"""

from __future__ import annotations


def load(path: str, **options):
    """A ScheduledCollective for ``path`` (see synth.runtime.api.load)."""
    from synth.runtime.api import load as _load

    return _load(path, **options)


__all__ = ["load"]
