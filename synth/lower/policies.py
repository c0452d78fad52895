"""How a lowering spreads a schedule's sends over channels, by name (``synth.lower.lowering``
implements each; the names alone, so a parser can offer them without loading the lowering)."""

CHANNEL_POLICIES = ("one", "link", "max")
