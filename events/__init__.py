"""The contract every component speaks, and the producers of inputs: typed events and their Avro codec, the
topic catalogue, the Kafka log (transactional producer, the one log reader), the local broker, the clock that
writes Ticks, the one JobSubmitted builder, and the trace loader that replays job traces as submissions."""
