"""End-to-end tests: engine, workers, inputs and the API service on a real nats-server."""
