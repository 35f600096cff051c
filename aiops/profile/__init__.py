"""AI flame graphs: eBPF uprobes on the CUDA runtime/driver and NCCL in one process, joined with GPU busy/idle.

probes.py      the probe table, finding the target's CUDA libraries in /proc/PID/maps, attaching with bcc
stacks.py      draining the BPF maps (user stacks, calls, blocked time) once per slice
symbolize.py   native frames through bcc's symboliser
gpu.py         GPU utilisation sources (NVML or the simulator's NVML) and the busy/idle join
folded.py      the four views (calls, launch, blocked, idle) as folded stacks
speedscope.py  speedscope JSON
flamegraph.py  a self-contained interactive SVG (inline JS: search, zoom)
duty.py        duty-cycled probing: which slices are probed, the BPF gate, attaching and detaching per window
session.py     one profiling run: attach, slice, join, scale
outputs.py     writing the folded files, speedscope JSON, SVG and summary.json
store_rows.py  the summary into the store (profile_runs, profile_stacks; migration 11)
"""
