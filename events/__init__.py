"""Typed events, their Avro codec, the topic catalogue and the Kafka log: the contract every component speaks."""
