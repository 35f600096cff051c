"""Native frame names through bcc's symboliser (ELF symbol tables of the target's mapped files).

Resolution must happen while the target is alive (bcc reads /proc/PID/maps), so session.py resolves each
slice's new stacks as it goes and caches addresses. Names are hostile data (any string a binary carries): they
are kept as text here and escaped by each output (folded.py, flamegraph.py).
"""

from __future__ import annotations

from typing import Any

UNKNOWN = "[unknown]"


class Symbolizer:
    def __init__(self, bpf: Any, pid: int) -> None:
        self._bpf = bpf
        self._pid = pid
        self._cache: dict[int, str] = {}

    def name(self, address: int) -> str:
        found = self._cache.get(address)
        if found is None:
            found = self._cache[address] = self._resolve(address)
        return found

    def _resolve(self, address: int) -> str:
        raw = self._bpf.sym(address, self._pid, show_module=True, show_offset=False)
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        # bcc answers "name [module]" or "[unknown] [module]"/"[unknown]"
        name, _, module = text.partition(" [")
        module = module.removesuffix("]")  # "[vdso]]" -> "[vdso]", "libffi.so.8]" -> "libffi.so.8"
        if name == UNKNOWN or not name:
            if not module or module == "unknown":
                return UNKNOWN
            return module if module.startswith("[") else f"[{module}]"
        return name

    def frames(self, addresses: tuple[int, ...]) -> tuple[str, ...]:
        """Root first (flame graph order) from leaf-first addresses."""
        return tuple(self.name(address) for address in reversed(addresses))
