"""Telemetry sources, each a `Collector` (collectors.base): NVML, sysfs, eBPF.

Collectors read; they import nothing from aiops.control, aiops.sim or guardrails (the eBPF readers use
aiops.datapath for its maps, ABI and loader). The simulator's adapter, built on collectors.base, is
aiops/sim/telemetry.py."""
