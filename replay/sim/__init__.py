"""The trace-driven simulator: workload and cell, the run loop, metrics, reports and the `gangway sim` CLI."""
