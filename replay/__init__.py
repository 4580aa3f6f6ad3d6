"""Shells over the whole system: the `gangway` command (cli.py dispatches every subcommand), the virtual-time
runners (the in-memory cell, scenarios, the simulator), verify and rebuild over a recorded log, and the demo."""

from events.compiled import install

install()  # the compiled build of the in-memory cell and the core, when it matches their sources
