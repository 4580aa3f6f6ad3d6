"""The read model behind the query API and the dashboard: query-shaped documents folded from cells' logs into
RocksDB (documents.py, fold.py), the store and its lookups (store.py), and the projector that follows the log
(projector.py)."""
