"""Kafka parts shared by the Kafka receiver and the Kafka exporters: connection settings,
reaching the brokers, and the bookkeeping of what has been done."""
