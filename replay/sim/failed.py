"""Why a simulation stops early. Its own module: the compiled meter raises it, and mypyc compiles no exception class."""


class DeciderFailed(RuntimeError):
    """A decider raised (or decided what the log cannot hold) during a simulation: the cell carries on, as a real
    one does, but the figures would measure a broken decider, so the run stops here."""
