"""Virtual-time shells over the pure core: the in-memory log runner, simulated node agents, scenario files."""
