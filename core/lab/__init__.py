"""The lab: machines across a network and the Prometheus exporter."""
