"""State folded from the log: the cell state and `evolve` (pure), decisions laid over a state and lifted off
(the replica's overlay), the rows of a state and its RocksDB store, and the terminal view."""
