"""brokers package."""
