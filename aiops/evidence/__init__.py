"""Evidence from files operators already have (issue 13): kernel logs, `nvidia-smi -q`, NCCL/PyTorch/UCX logs,
InfiniBand tools, `lspci -vv`, Prometheus text, `ipmitool sel list`, sysfs dumps.

`detect` names a file's format from its content, one parser module per family turns lines into `LogEvent`s,
`rules` turns events into hypotheses citing `file:line`, and `investigate` puts it together (docs/INVESTIGATE.md).
"""

from __future__ import annotations

from aiops.evidence.events import FORMATS, LogEvent
from aiops.evidence.investigate import investigate

__all__ = ["FORMATS", "LogEvent", "investigate"]
