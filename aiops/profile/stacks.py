"""Reading the BPF maps of bpf/cuda_uprobes.bpf.c: one `drain()` per slice returns what accumulated since the
last one (calls and blocked time per (stack id, caller, probe)) and clears the counts. The stack table is kept:
stack ids stay valid for the whole run and are resolved to addresses once, at the end.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

MAX_KEYS_PER_DRAIN = 16384  # the size of `counts` in bpf/cuda_uprobes.bpf.c


@dataclass(frozen=True)
class RawCount:
    """One key of the `counts` map as drained: addresses are resolved later."""

    stack_id: int  # negative: the kernel could not walk the stack (no frames kept)
    probe: int
    caller_ip: int
    calls: int
    blocked_ns: int


def drain(bpf: Any) -> list[RawCount]:
    """The counts since the last drain; the map is emptied (entries added meanwhile land in the next slice)."""
    counts = bpf[b"counts"]
    out: list[RawCount] = []
    for key, value in list(counts.items())[:MAX_KEYS_PER_DRAIN]:
        out.append(
            RawCount(
                stack_id=int(key.user_stack_id),
                probe=int(key.probe),
                caller_ip=int(key.caller_ip),
                calls=int(value.calls),
                blocked_ns=int(value.blocked_ns),
            )
        )
        with contextlib.suppress(KeyError):  # gone already: nothing to clear
            del counts[key]
    return out


def stack_addresses(bpf: Any, stack_id: int, caller_ip: int) -> tuple[int, ...]:
    """Addresses leaf first; the caller's return address (read at [sp] on entry) goes after the probed IP
    unless the kernel's walk already has it."""
    if stack_id < 0:
        return (caller_ip,) if caller_ip else ()
    try:
        addresses = [int(address) for address in bpf[b"stacks"].walk(stack_id)]
    except KeyError:
        return ()
    if caller_ip and addresses and (len(addresses) < 2 or addresses[1] != caller_ip):
        addresses.insert(1, caller_ip)  # kernels since 6.12 add it themselves (perf_callchain_user)
    return tuple(addresses)
