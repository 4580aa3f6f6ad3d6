"""The placer service: decide.py is its pure core, policy.py its knobs."""
