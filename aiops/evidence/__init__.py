"""Evidence from files operators already have (issues 13 and 26): kernel logs, `nvidia-smi -q` and the plain
table, NCCL/PyTorch/UCX logs, InfiniBand tools, `ethtool -S`, `lspci -vv`, `dcgmi`, Prometheus text, `ipmitool
sel`, BMC/Redfish logs, the fabric manager log, driver parameters, sysfs dumps; alone or in bundles (directories,
tar/zip archives, nvidia-bug-report.log.gz, sosreports, must-gathers: `bundle`, `sections`).

`detect` names a file's format from its content, one parser module per family turns lines into `LogEvent`s,
`rules` turns events into hypotheses citing `file:line`, and `investigate` puts it together (docs/INVESTIGATE.md).
"""

from __future__ import annotations

from aiops.evidence.events import FORMATS, LogEvent
from aiops.evidence.investigate import investigate

__all__ = ["FORMATS", "LogEvent", "investigate"]
