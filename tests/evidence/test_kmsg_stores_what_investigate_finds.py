"""The live node stores what `aiops investigate` finds (issue 22, item 4): real GPU-off-the-bus and GSP lines of
the corpus (evals/real, never edited), written to the /dev/kmsg collector's reader as the kernel hands them out
(one record per read(2)), become kernel_events rows of the same kind, code and bus id (or NVRM's GPU<n>, column
`device`, m016) as investigate's events on the pasted file. Before one parser served both, the collector counted these lines as unknown and stored none.

A record is what the kernel logged with one printk: the dmesg print of the multi-line `The NVIDIA GPU ... has
fallen off the bus` message (gpu-fell-off-bus-no-xid-fleet-2025) shows its continuation lines indented under one
timestamp, so it is one record, and /dev/kmsg escapes the newlines in it as `\\x0a`
(Documentation/ABI/testing/dev-kmsg)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import aiops.store.store as store_module
from aiops.evidence import kernel
from aiops.evidence.reader import lines
from aiops.store import MIGRATIONS, Store
from collectors.kmsg import KmsgCollector, KmsgReader

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"

# (file, the line numbers of one record); the GPU each bus id is on this node
CASES = [
    (
        "xid79-gsp-rpc-rtx5090-open-module-2026/kern.log",
        (4,),
    ),  # NVRM: GPU 0000:06:00.0: GPU has fallen off ...
    (
        "gpu-fell-off-bus-no-xid-fleet-2025/dmesg.txt",
        (1, 2, 3),
    ),  # The NVIDIA GPU 0000:b3:00.0 / ... / fallen off
    (
        "xid154-gsp-heartbeat-timeout-rtx5080-2026/kern.log",
        (1,),
    ),  # _kgspRpcRecvPoll: GSP RM heartbeat timed out
    (
        "xid154-gsp-heartbeat-timeout-rtx5080-2026/kern.log",
        (2,),
    ),  # _kgspIsHeartbeatTimedOut: Heartbeat timed out
    ("xid120-xid154-gsp-crash-rtx-pro-6000-2026/kern-2026-03-27.log", (2,)),  # GPU0 ... PMU has halted
]
GPUS = {"0000:06:00.0": "node0/gpu0", "0000:b3:00.0": "node0/gpu1", "0000:01:00.0": "node0/gpu2"}


def _investigated(path: Path, number: int) -> tuple[str, str | None, int | None]:
    """investigate's event on one line of the pasted file (the lines before it read first)."""
    numbered = list(lines(path))
    (event,) = [e for e in kernel.parse(path.name, numbered) if e is not None and e.line == number]
    return event.kind, event.component, event.code


def _record(path: Path, numbers: tuple[int, ...], seq: int) -> bytes:
    """The /dev/kmsg record of those lines: their messages without the paste's prefixes, newlines escaped."""
    text = dict(lines(path))
    message = "\\x0a".join(kernel._split_prefix(text[n])[0] for n in numbers)
    return f"3,{seq},{5_000_000 + seq},-;{message}\n".encode()


def test_off_the_bus_and_gsp_lines_are_stored_as_investigate_reads_them(tmp_path: Path, store: Store) -> None:
    records = [_record(REAL / name, numbers, 100 + i) for i, (name, numbers) in enumerate(CASES)]
    device = tmp_path / "kmsg"
    device.write_bytes(b"")
    reader = KmsgReader(device)
    answers = list(records)

    def read(fd: int, size: int) -> bytes:  # the kernel's answer: one whole record per read(2), then EAGAIN
        if not answers:
            raise BlockingIOError(errno.EAGAIN, "again")
        return answers.pop(0)

    reader.read_fd = read
    collector = KmsgCollector("node0", tmp_path, components_by_pci=GPUS, reader=reader)
    try:
        store.ingest_many(collector.collect(1_700_000_100.0))
    finally:
        collector.close()
    rows = store.query(
        "SELECT seq, kind, component, code, pci_bus_id, device FROM kernel_events ORDER BY seq"
    )
    assert [r["seq"] for r in rows] == [100, 101, 102, 103, 104] and collector.unknown_lines == 0

    for (name, numbers), row in zip(CASES, rows, strict=True):
        kind, component, code = _investigated(REAL / name, numbers[-1])
        assert kind in ("fell_off_bus", "gsp_timeout", "gsp_error")
        assert (row["kind"], row["code"]) == (kind, code), name
        if kind == "fell_off_bus":  # investigate names the GPU by its bus id; the store by it and the GPU
            assert component in GPUS and (row["pci_bus_id"], row["component"]) == (component, GPUS[component])
        else:  # a GSP line names no bus id: both keep NVRM's `GPU<n>` when it names one (the store as `device`)
            assert (row["pci_bus_id"], row["component"], row["device"]) == (None, "node0", component)
    assert [r["kind"] for r in rows] == [
        "fell_off_bus",
        "fell_off_bus",
        "gsp_timeout",
        "gsp_timeout",
        "gsp_error",
    ]
    assert rows[-1]["device"] == "GPU0"  # `NVRM: GPU0 _kgspRpcGspEventPmuHalted: ...`


@pytest.mark.parametrize(("name", "numbers"), CASES)
def test_the_record_is_the_real_line(name: str, numbers: tuple[int, ...]) -> None:
    """The records above carry the corpus's words unchanged (prefixes and the paste's indentation aside)."""
    record = _record(REAL / name, numbers, 1).decode()
    text = dict(lines(REAL / name))
    for part, n in zip(record.partition(";")[2].rstrip("\n").split("\\x0a"), numbers, strict=True):
        assert text[n].rstrip().endswith(part) and len(part) > 30


def test_a_store_from_before_m016_keeps_its_rows_and_gains_the_device_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.duckdb"
    with monkeypatch.context() as m:  # a store as aiops wrote it before migration 16
        m.setattr(store_module, "MIGRATIONS", tuple(m for m in MIGRATIONS if m.version < 16))
        with Store(db) as old:
            assert "device" not in old.columns("kernel_events")
            old.conn.execute(
                "INSERT INTO kernel_events (ts_s, node, seq, level, kind, component, code, message) VALUES "
                "(1.0, 'node0', 1, 3, 'xid', 'node0/gpu0', 79, 'NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.')"
            )
    with Store(db) as upgraded:
        assert upgraded.schema_version() >= 16
        assert upgraded.query("SELECT kind, code, device FROM kernel_events") == [
            {"kind": "xid", "code": 79, "device": None}
        ]
