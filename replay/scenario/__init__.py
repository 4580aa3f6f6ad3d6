"""Scenario files: their format (spec), inputs, expectations, policy overrides, the runner and its CLI."""
