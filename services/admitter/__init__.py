"""The admitter service: decide.py is its pure core, policy.py its knobs."""
