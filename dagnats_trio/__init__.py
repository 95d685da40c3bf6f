"""dagnats-trio: a durable workflow and agent runtime for Trio, on NATS JetStream."""
