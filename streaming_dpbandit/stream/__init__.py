"""The streaming service: event schemas, transports (Kafka, in-process), the reward join,
snapshots and the service loop (DESIGN §2, §5)."""
