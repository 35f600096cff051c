"""The typed event every parser yields, and the formats `aiops investigate` accepts."""

from __future__ import annotations

from dataclasses import dataclass, field

# Format names, as `detect.detect_format` returns them and the JSON `sources[].format` shows them.
FORMATS: dict[str, str] = {
    "kernel-log": "kernel log: dmesg, dmesg -T, journalctl -k (text or -o json), syslog kern.log",
    "nvidia-smi-q": "nvidia-smi -q (text) or nvidia-smi -q -x (XML)",
    "nvidia-smi": "nvidia-smi (the plain table), nvidia-smi -L and nvidia-smi nvlink -s, and its failures (no "
    "devices, driver not reachable)",
    "nvidia-smi-query": "nvidia-smi --query-gpu=... --format=csv (with its header, or noheader after the command)",
    "nccl-log": "NCCL (NCCL_DEBUG), PyTorch ProcessGroupNCCL, UCX and CUDA runtime error output",
    "ib": "ibstat, ibqueryerrors, perfquery, rdma link, rdma statistic, ibdev2netdev",
    "ibv-devinfo": "ibv_devinfo (-v)",
    "ibstatus": "ibstatus (infiniband-diags)",
    "ethtool-stats": "ethtool -S",
    "dcgmi": "dcgmi diag, dcgmi health -c, dcgmi nvlink --link-status (whole or from any section on) and "
    "dcgmi dmon",
    "bmc-log": "iDRAC racadm getsel / lclog text and Redfish LogEntry records (JSON)",
    "fabric-manager": "NVIDIA fabric manager log (fabricmanager.log, or nv-fabricmanager journal lines)",
    "driver-params": "NVIDIA driver module parameters (/proc/driver/nvidia/params)",
    "lspci-vv": "lspci -vv (also plain lspci), incl. devices whose config space reads all ones",
    "prometheus-text": "Prometheus text exposition (dcgm-exporter, node_exporter)",
    "ipmi-sel": "ipmitool sel list / sel elist, FreeIPMI ipmi-sel",
    "sysfs": "sysfs dump (grep -r . /sys/class/...; path:value lines: IB port states, hw_counters)",
    "train-log": "training iteration log with step time and data time (mmcv/mmdet, MMEngine, detectron2, YOLOX, "
    "PyTorch's ImageNet example)",
    "gpu-agent-log": "NVIDIA k8s-device-plugin and DCGM nv-hostengine logs",
    "slurm": "Slurm: scontrol show node/job, sinfo (-R), slurmctld/slurmd/slurmstepd logs, NHC output",
    "ipmi-sensors": "FreeIPMI ipmi-sensors table",
    "nccl-ras": "NCCL RAS client report (ncclras)",
    "k8s": "Kubernetes: events, kubectl describe node (conditions, taints, GPU capacity), kubectl get pods",
    "generic": "any other text: its failure lines, bad readings, error counters and identifiers",
}


@dataclass(frozen=True)
class LogEvent:
    """One recognised line. `ts_s` is UTC epoch seconds only when the line gives a date with a known zone (or
    an epoch); `uptime_s` is seconds since boot (dmesg); neither is ever guessed. `component` is what the line
    names (a PCI bus id `0000:07:00.0`, `GPU5`, an HCA port `mlx5_0:1`), `kind` a short event name (`xid`,
    `aer`, `ib_port_state`, ...), `code` its number where it has one (the Xid, an error status), `value` a
    reading, `detail` the rest. `raw` is the line as read, never edited: shown only through `aiops.text`."""

    source: str
    line: int
    kind: str
    raw: str
    ts_s: float | None = None
    uptime_s: float | None = None
    host: str | None = None
    component: str | None = None
    code: int | None = None
    value: float | None = None
    detail: dict[str, str] = field(default_factory=dict)

    @property
    def cite(self) -> str:
        return f"{self.source}:{self.line}"
