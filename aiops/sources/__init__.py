"""Telemetry that already lives elsewhere, read into a workspace: Prometheus / VictoriaMetrics holding
dcgm-exporter and node_exporter series (`prometheus`, `mapping`), and the twin's exposition in those exporters'
exact names and labels (`exposition`)."""
