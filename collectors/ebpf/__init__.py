"""eBPF collectors and loaders (bcc): lanes classifier maps, tcp tracepoints."""
