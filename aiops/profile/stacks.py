"""Reading the BPF maps of bpf/cuda_uprobes.bpf.c: one `Drainer.drain()` per slice returns what accumulated
since the last one (calls and blocked time per (stack id, caller, probe)).

The kernel's counters are never cleared: reading a key and then deleting it would lose the increments made
in between (measured: 4 of 6,000 calls), so the reader keeps the last totals and returns differences. The stack
table is kept too: stack ids stay valid for the whole run and are resolved to addresses as they first appear.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MAX_KEYS_PER_DRAIN = 16384  # the size of `counts` in bpf/cuda_uprobes.bpf.c


@dataclass(frozen=True)
class RawCount:
    """One key of the `counts` map, as a difference since the last drain: addresses are resolved later."""

    stack_id: int  # negative: the kernel could not walk the stack (no frames kept)
    probe: int
    caller_ip: int
    calls: int
    blocked_ns: int


class Drainer:
    def __init__(self, bpf: Any) -> None:
        self._counts = bpf[b"counts"]
        self._last: dict[tuple[int, int, int], tuple[int, int]] = {}

    def drain(self) -> list[RawCount]:
        out: list[RawCount] = []
        for key, value in list(self._counts.items())[:MAX_KEYS_PER_DRAIN]:
            ident = (int(key.user_stack_id), int(key.probe), int(key.caller_ip))
            calls, blocked_ns = int(value.calls), int(value.blocked_ns)
            last_calls, last_blocked_ns = self._last.get(ident, (0, 0))
            if calls == last_calls and blocked_ns == last_blocked_ns:
                continue
            self._last[ident] = (calls, blocked_ns)
            out.append(RawCount(*ident, calls=calls - last_calls, blocked_ns=blocked_ns - last_blocked_ns))
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
