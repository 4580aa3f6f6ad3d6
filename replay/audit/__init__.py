"""The audit commands' pure parts: a job's timeline and why it waits, the cell at an offset, the fair-share
ledger and what-if replays, all folded from a cell's log as `replay/source.py` reads it."""
