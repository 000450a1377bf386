"""The shipped Prometheus rules and Grafana dashboard, and a real Prometheus to run them (O2)."""
