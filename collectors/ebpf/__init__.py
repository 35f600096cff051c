"""eBPF readers: lane telemetry from the classifier's pinned maps (telemetry) and TCP tracepoints
(tcp_probe). They read through aiops.datapath (maps, ABI, loader); everything that writes the datapath
lives there."""
