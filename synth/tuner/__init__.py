"""Stock NCCL tuned by synth: the config file of NCCL's example tuner plugin (``NCCL_TUNER_PLUGIN``,
``NCCL_TUNER_CONFIG_FILE``) and the ``NCCL_ALGO`` / ``NCCL_PROTO`` settings.

- ``config``: the file's lines as the plugin reads them (its grammar, names and matching) and as
  synth writes them;
- ``rules``: what ``synth check`` says of a file: lines that break the plugin's rules, lines that
  can never apply, sizes that fall through to no line;
- ``table``: which NCCL algorithm, protocol and channel count is fastest at every size in synth's
  model (what reports call NCCL's choice), as the ranges of a file; ``env``: the same choice as
  environment settings, and what those cannot say.

The rules are those of ``shared/reference/nccl-tuner.md`` (read from NCCL's own source).
"""
