"""Pure state models folded from the log, their RocksDB store, and the read-model API."""
