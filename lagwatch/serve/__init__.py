"""EDGE: the Prometheus exposition, health endpoints and the JSON API, on one port."""
