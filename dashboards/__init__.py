"""Grafana dashboards for ctxprec (JSON built by dashboards/generate.py)."""
