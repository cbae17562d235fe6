"""Cluster learning: every replica learns from the scores of all replicas (docs/KAFKA.md)."""
