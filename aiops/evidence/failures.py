"""Lines that say a run failed, whatever else the log holds: a log that shows one is never `healthy`.

- NCCL `NCCL WARN Cuda failure 'text'` / `Cuda failure N 'text'` and `ncclUnhandledCudaError` (NCCL's
  CUDACHECK macro: a CUDA call inside NCCL failed).
- CUDA runtime errors as frameworks print them: `cuda runtime error (N) : text` (PyTorch's THC),
  `Error N: text` after `cudaGetDeviceCount()`, `CUDA error: text` (kept by nccl.py), `CUDA_ERROR_*` and
  `cudaError*` names (cuda.h `CUresult`, cuda_runtime_api.h `cudaError_t`).
- CUDA's error strings where a program prints them without NCCL's or the runtime's words: NVIDIA's NGC
  containers' start-up check (`[[ System not yet initialized (error 802) ]]`, the runtime's string and number),
  and a program's own `Error ...: <CUDA error string>` (`what():  Error (gpu_burn-drv.cpp:298): system not yet
  initialized`: cuGetErrorString's text, cuda.h `CUresult`).
- PyTorch ProcessGroupNCCL's own report of failed or timed-out NCCL operations, with or without the
  watchdog's line: `Some NCCL operations have failed or timed out`, `NCCL error in: ...`, `Timeout at NCCL
  work: N`, `failure detected by watchdog`.

A CUDA error that names a condition carries it in `detail["what"]`, and `detail["code"]` holds the runtime's
number where the line gives one: 802 `cudaErrorSystemNotReady` ("system not yet initialized": CUDA's
documentation says the system is not ready to start CUDA work and asks to check that all required driver
daemons are running: on NVSwitch systems the fabric manager) is read by rules_gpu.driver_state.
"""

from __future__ import annotations

import re
from typing import Any

from aiops.evidence.events import LogEvent

_NCCL_CUDA = re.compile(r"Cuda failure (?:(?P<code>\d+) )?'(?P<what>[^']{1,200})'")
_RUNTIME = re.compile(r"cuda runtime error \((?P<code>\d+)\) ?: ?(?P<what>[^\n]{1,200}?)(?: at \S+)?$")
_DEVICE_COUNT = re.compile(r"cudaGetDeviceCount\(\).{0,200}?Error (?P<code>\d+): (?P<what>[^\n]{1,200})$")
_NAMED = re.compile(
    r"\b(?P<name>CUDA_ERROR_[A-Z_]{3,40}|cudaError(?!ECCUncorrectable)[A-Z]\w{2,40})\b(?::? ?(?P<what>.{0,160}))?"
)
_CODE_OF_NAME = {"cudaErrorSystemNotReady": 802, "CUDA_ERROR_SYSTEM_NOT_READY": 802}
# The NGC containers' entrypoint prints `[[ <cudaGetErrorString> (error <cudaError_t>) ]]` when CUDA fails to start.
_CONTAINER_CHECK = re.compile(r"\[\[\s*(?P<what>[^\[\]\n]{1,200}?) \(error (?P<code>\d{1,4})\)\s*\]\]")
# CUDA's own strings for errors that name a state of the system, not of a program (cuda.h `CUresult`, the
# text cuGetErrorString gives): 802 CUDA_ERROR_SYSTEM_NOT_READY, 304 CUDA_ERROR_OPERATING_SYSTEM. Read only
# after an `error` word and a colon, at the line's end: a program printing CUDA's message for a failed call.
_CODE_OF_TEXT = {
    "system not yet initialized": 802,
    "os call failed or operation not supported on this os": 304,
}
_ERROR_THEN_TEXT = re.compile(
    r"\berror\b[^\n]{0,120}?:\s*(?P<what>system not yet initialized|OS call failed or operation not supported on "
    r"this OS)\s*$",
    re.I,
)
_OPS_FAILED = re.compile(
    r"Some NCCL operations have failed or timed out|NCCL error in: |ncclUnhandledCudaError|"
    r"ncclSystemError|ncclInternalError|ncclRemoteError|Timeout at NCCL work: \d+|"
    r"failure detected by watchdog at work"
)
SYSTEM_NOT_READY = 802
_NOT_READY_TEXT = "system not yet initialized"


def _code(text: str | None, what: str) -> str | None:
    if text:
        return text
    return str(SYSTEM_NOT_READY) if _NOT_READY_TEXT in what.lower() else None


def failure_detail(what: str) -> dict[str, str]:
    """`what` and, for CUDA's "system not yet initialized", its code 802."""
    code = _code(None, what)
    return {"what": what} if code is None else {"what": what, "code": code}


def failure_event(raw: str, base: dict[str, Any]) -> LogEvent | None:
    """A `cuda_error` or `nccl_op_failed` event for a line that says the run failed; None otherwise. `base`
    holds the LogEvent fields the caller already has (source, line, raw, host, ts_s)."""
    for pattern in (_NCCL_CUDA, _RUNTIME, _DEVICE_COUNT, _CONTAINER_CHECK):
        if (m := pattern.search(raw)) is not None:
            what = m.group("what").strip()
            detail = {"what": what}
            if (code := _code(m.group("code"), what)) is not None:
                detail["code"] = code
            return LogEvent(kind="cuda_error", detail=detail, **base)
    if (m := _NAMED.search(raw)) is not None:
        name = m.group("name")
        detail = {"what": name}
        if (number := _CODE_OF_NAME.get(name)) is not None:
            detail["code"] = str(number)
        return LogEvent(kind="cuda_error", detail=detail, **base)
    if (m := _ERROR_THEN_TEXT.search(raw)) is not None:
        what = m.group("what")
        return LogEvent(
            kind="cuda_error", detail={"what": what, "code": str(_CODE_OF_TEXT[what.lower()])}, **base
        )
    if _OPS_FAILED.search(raw):
        return LogEvent(kind="nccl_op_failed", **base)
    return None
