"""State folded from the log: the cell state and `evolve` (pure), decisions laid over a state and lifted off
(the replica's overlay), the rows of a state and its RocksDB store, and the terminal view."""

from events.compiled import install

install()  # the compiled build of the fold and the deciders, when it matches their sources
