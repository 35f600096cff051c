"""Telemetry sources, each a `Collector` (collectors.base): NVML, sysfs, eBPF, and the simulator adapter."""
