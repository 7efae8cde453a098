"""The shells every stage runs in: the Kafka stage worker, the engine-backed one, job state."""
