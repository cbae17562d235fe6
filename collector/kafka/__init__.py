"""Kafka parts shared by the Kafka receiver and the Kafka results exporter: connection settings
and the bookkeeping of what has been done."""
