"""Node agents: the simulated fleet on Kafka, the simulated agents of virtual-time runs, and their failures."""
