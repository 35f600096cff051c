"""The eBPF C sources (lanes.bpf.c, lanes.h, tcp_probe.bpf.c, empty.bpf.c), shipped as package data.

No Python here: aiops.datapath.loader finds these files with importlib.resources.files("bpf") and compiles
them with bcc, so a wheel install carries the sources its loader needs.
"""
