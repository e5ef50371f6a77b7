"""SGLang's launch flags: each release's table, rendering a config into argv, and SGLang's own parser.

- ``release_tables/``: every release's flags as its REAL parser declares them, one JSON file a release
  read from its wheel (``table_for(version)``).
- ``modelled``: the flags autotune models by hand, typed, with the releases that have them (``FLAGS``).
- ``argv``: ``render_argv`` (a ``ServerConfig`` into a release's argv), ``build_parser`` (the release's
  flags as SGLang's argparse has them), ``config_from_namespace``, ``effective_config``, ``shell_line``.
- ``unknown``: a flag a release's table lacks: a prefix, another release's flag, a typo or a newer build's.
- ``installed``: the SGLang that will really be launched: its version, and its real parser fed every argv.
- ``extract``: ``python -m autotune.sglang.flags.extract WHEEL``: a release's table from its wheel.
- ``parser_env``: parser-only environments: a release's real parser importable on a CPU-only machine.
- ``_real_parser_script``, ``_parser_stubs``: standalone scripts (no autotune import) run by an
  SGLang-capable python: SGLang's real parser fed argv lists, stand-ins for its heavy imports.
"""
