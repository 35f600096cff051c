"""The kernel log: record and line parsers on lines in the real formats (copied from kernel logs in public bug
reports and from the kernel's format strings), the collector over a list of records, EPIPE as an `overrun`
row, and the reader on this machine's real /dev/kmsg (root)."""

from __future__ import annotations

import errno
import os
import time
import uuid
from pathlib import Path

import pytest

from aiops.store import Store
from collectors.kmsg import KmsgCollector, KmsgReader, ReadResult
from collectors.kmsg_parse import KernelLine, KmsgRecord, classify, parse_record, pci_ids_in
from collectors.pci import pci_bus_id
from tests.host_helpers import require_root

LINES: list[tuple[str, KernelLine | None]] = [
    # NVIDIA Xid: current drivers, the `pid='<unknown>'` form, an older driver's, and before the PCI: prefix
    (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.",
        KernelLine("xid", 79, "0000:3b:00.0"),
    ),
    (
        "NVRM: Xid (PCI:0000:05:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
        KernelLine("xid", 79, "0000:05:00.0"),
    ),
    (
        "NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000009 intr 00800000",
        KernelLine("xid", 32, "0000:01:00.0"),
    ),
    (
        "NVRM: Xid (0000:03:00): 13, 0003 00000000 00008297 00001098 00000000 00000044",
        KernelLine("xid", 13, "0000:03:00.0"),
    ),
    # PCIe AER (drivers/pci/pcie/aer.c): header lines of three kernel generations and per-device lines
    ("pcieport 0000:00:1c.5: AER: Corrected error received: id=00e5", KernelLine("aer", 2, "0000:00:1c.5")),
    (
        "pcieport 0000:00:1c.1: AER: Corrected error received: 0000:00:1c.1",
        KernelLine("aer", 2, "0000:00:1c.1"),
    ),
    (
        "pcieport 0000:00:1d.0: AER: Multiple Corrected error received: id=00e8",
        KernelLine("aer", 2, "0000:00:1d.0"),
    ),
    (
        "pcieport 0000:00:1d.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e8(Receiver ID)",
        KernelLine("aer", 2, "0000:00:1d.0"),
    ),
    (
        "pcieport 0000:00:1c.0: AER: PCIe Bus Error: severity=Corrected, type=Data Link Layer, (Transmitter ID)",
        KernelLine("aer", 2, "0000:00:1c.0"),
    ),
    (
        "pcieport 0000:00:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:00:00.0",
        KernelLine("aer", 0, "0000:00:00.0"),
    ),
    (
        "pcieport 0000:00:00.0: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester ID)",
        KernelLine("aer", 0, "0000:00:00.0"),
    ),
    (
        "pcieport 0000:80:1b.4: AER: Uncorrectable (Non-Fatal) error message received from 0000:80:1b.4",
        KernelLine("aer", 0, "0000:80:1b.4"),
    ),
    (
        "pcieport 0000:80:1b.4: AER: Correctable error message received from 0000:80:1b.4",
        KernelLine("aer", 2, "0000:80:1b.4"),
    ),
    (
        "pcieport 0000:3a:00.0: AER: Uncorrected (Fatal) error received: 0000:3b:00.0",
        KernelLine("aer", 1, "0000:3b:00.0"),
    ),  # the source device behind the port: the GPU
    (
        "nvidia 0000:3b:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Inaccessible, (Unregistered Agent ID)",
        KernelLine("aer", 1, "0000:3b:00.0"),
    ),
    # the status/mask line after a header: an AER detail `aiops investigate` reads, so the collector stores it too
    (
        "pcieport 0000:00:1c.5:   device [8086:9d15] error status/mask=00000001/00002000",
        KernelLine("aer_detail", None, "0000:00:1c.5"),
    ),
    ("pcieport 0000:00:1c.5:    [ 0] Receiver Error        ", None),
    # links: mlx5e, the IB core's port state, Intel drivers, bonding, addrconf
    ("mlx5_core 0000:01:00.0 enp1s0f0np0: Link down", KernelLine("link", 0, "0000:01:00.0", "enp1s0f0np0")),
    ("mlx5_core 0000:01:00.1 enp1s0f1np1: Link up", KernelLine("link", 1, "0000:01:00.1", "enp1s0f1np1")),
    ("mlx5_core 0000:53:00.0 mlx5_3: Port: 1 Link DOWN", KernelLine("link", 0, "0000:53:00.0", "mlx5_3")),
    (
        "mlx5_core 0000:08:00.0 rdmap8s0f0: Port: 2 Link ACTIVE",
        KernelLine("link", 1, "0000:08:00.0", "rdmap8s0f0"),
    ),
    (
        "ixgbe 0000:05:00.0 enp5s0: NIC Link is Up 10 Gbps, Flow Control: RX/TX",
        KernelLine("link", 1, "0000:05:00.0", "enp5s0"),
    ),
    ("igc 0000:05:00.0 eth5: NIC Link is Down", KernelLine("link", 0, "0000:05:00.0", "eth5")),
    ("e1000e: enp0s31f6 NIC Link is Down", KernelLine("link", 0, None, "enp0s31f6")),
    (
        "bond0: (slave enp83s0f0np0): link status definitely down, disabling slave",
        KernelLine("link", 0, None, "enp83s0f0np0"),
    ),
    ("IPv6: ADDRCONF(NETDEV_CHANGE): ib0: link becomes ready", KernelLine("link", 1, None, "ib0")),
    # CPU thermal throttling (arch/x86/kernel/cpu/mce/therm_throt.c), older kernels with an mce: prefix
    (
        "CPU0: Package temperature above threshold, cpu clock throttled (total events = 4128)",
        KernelLine("thermal", 1),
    ),
    (
        "mce: CPU7: Package temperature above threshold, cpu clock throttled (total events = 144933)",
        KernelLine("thermal", 1),
    ),
    ("CPU3: Package temperature/speed normal", KernelLine("thermal", 0)),
    # machine checks: the mce core, AMD's decoder, GHES, EDAC
    ("mce: [Hardware Error]: Machine check events logged", KernelLine("mce")),
    ("mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 5: bea0000000000108", KernelLine("mce", 5)),
    (
        "[Hardware Error]: CPU:0 (19:61:2) MC21_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2040000400011b",
        KernelLine("mce", 21),
    ),
    ("{1}[Hardware Error]: event severity: corrected", KernelLine("mce")),
    (
        "EDAC MC0: 4858 CE memory read error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 (channel:0 slot:0 page:0x1021ad "
        "offset:0x180 grain:32 syndrome:0x0 -  OVERFLOW area:DRAM err_code:0001:0092 socket:0 ha:0 channel_mask:1 "
        "rank:1 )",
        KernelLine("mce"),
    ),
    # not ours
    ("EXT4-fs (md127p3): re-mounted 0f3cd65a-338b-4574-bba3-ecef214e1917 r/w. Quota mode: none.", None),
    (
        "workqueue: ib_cache_event_task [ib_core] hogged CPU for >10000us 4 times, consider switching to WQ_UNBOUND",
        None,
    ),
    ("nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 11001, Fatal, Link 04 ingress invalid command", None),
]


@pytest.mark.parametrize(("line", "expected"), LINES)
def test_classify_real_lines(line: str, expected: KernelLine | None) -> None:
    assert classify(line) == expected


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("0000:3b:00.0", "0000:3b:00.0"),  # sysfs, dev_printk
        ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML (eight-digit domain, upper case)
        ("00000000:2D:00.0", "0000:2d:00.0"),
        (b"00000000:3B:00.0\x00", "0000:3b:00.0"),  # pynvml's busId: bytes, NUL-terminated
        ("00000000:3B:00.0\x00\x00", "0000:3b:00.0"),
        ("PCI:0000:07:00", "0000:07:00.0"),  # an Xid: the PCI: prefix, no function
        ("pci:0000:07:00", "0000:07:00.0"),
        ("0000:3b:00", "0000:3b:00.0"),  # an older driver's Xid
        ("07:00.0", "0000:07:00.0"),  # lspci: no domain
        ("3b:00.1", "0000:3b:00.1"),
        (" 0000:3b:00.0\n", "0000:3b:00.0"),
        ("0001:6c:00", "0001:6c:00.0"),  # a second PCI segment (evals/real, xid119 case)
        (
            "00010000:E1:00.0",
            "10000:e1:00.0",
        ),  # a VMD domain above 0xffff keeps its digits, as sysfs names it
        ("10000:e1:00.0", "10000:e1:00.0"),
    ],
)
def test_pci_bus_ids_are_canonical(text: str | bytes, canonical: str) -> None:
    assert pci_bus_id(text) == canonical
    assert pci_bus_id(canonical) == canonical  # the canonical form is a fixed point


@pytest.mark.parametrize(
    "text", [None, "", "GPU-1234", "PCI:...", "0000:3b:00.8", "3b:0.0", "0000:3b:00.0 x"]
)
def test_what_is_not_a_bus_id_is_none(text: str | None) -> None:
    assert pci_bus_id(text) is None


def test_pci_ids_in_lines() -> None:
    line = "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W)."
    assert pci_ids_in(line) == ["0000:5c:00.0"]
    assert pci_ids_in("NVRM: GPU at PCI:0000:01:00: GPU-34d7319c-5b19-1e75-186d-c187099e4fe5") == [
        "0000:01:00.0"
    ]
    assert pci_ids_in("x", {"DEVICE": "+pci:0000:00:1c.5"}) == ["0000:00:1c.5"]


def test_parse_record() -> None:
    raw = b"6,1234,5678901,-;mlx5_core 0000:01:00.0 enp1s0f0np0: Link down\n SUBSYSTEM=pci\n DEVICE=+pci:0000:01:00.0\n"
    assert parse_record(raw) == KmsgRecord(
        1234,
        6,
        0,
        5678901,
        "mlx5_core 0000:01:00.0 enp1s0f0np0: Link down",
        {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:01:00.0"},
    )
    written = parse_record(b"14,99,1,-;aiops-test \\x01 kept as the kernel escaped it\n")
    assert written is not None and (written.facility, written.level) == (1, 6)
    assert written.message == "aiops-test \\x01 kept as the kernel escaped it"
    assert parse_record(b"garbage") is None and parse_record(b"a,b,c;x") is None


class Records:
    """A RecordSource over a list: each read() returns the next batch."""

    path = "<records>"

    def __init__(self, *batches: ReadResult) -> None:
        self.batches = list(batches)

    def read(self, limit: int = 4096) -> ReadResult:
        return self.batches.pop(0) if self.batches else ReadResult()

    def close(self) -> None:
        pass


def _record(seq: int, message: str, level: int = 3, ts_us: int = 2_500_000) -> KmsgRecord:
    return KmsgRecord(seq, level, 0, ts_us, message)


GPU_MAP = {"0000:3b:00.0": "node0/gpu0", "0000:5e:00.0": "node0/nic0", "0000:5c:00.0": "node0/nic1"}


def test_collector_places_lines_and_feeds_gpu_events(store: Store) -> None:
    records = [
        _record(10, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus."),
        _record(
            11, "NVRM: Xid (PCI:0000:af:00): 48, pid='<unknown>', name=<unknown>, Ch 00000008"
        ),  # not ours
        _record(12, "mlx5_core 0000:5e:00.0 ens1f0np0: Link down", level=6),
        _record(13, "e1000e: ens1f0np0 NIC Link is Up 1000 Mbps Full Duplex, Flow Control: Rx/Tx", level=6),
        _record(
            14,
            "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on "
            "the PCIe slot (27W).",
        ),
        _record(
            15, "EXT4-fs (md127p3): re-mounted 0f3cd65a-338b-4574-bba3-ecef214e1917 r/w. Quota mode: none."
        ),
        _record(
            16,
            "CPU0: Package temperature above threshold, cpu clock throttled (total events = 4128)",
            level=4,
        ),
    ]
    collector = KmsgCollector(
        "node0",
        "/nonexistent",
        components_by_pci=GPU_MAP,
        components_by_device={"ens1f0np0": "node0/nic0"},
        reader=Records(ReadResult(records)),
        boot_epoch=lambda: 1_700_000_000.0,
    )
    tables = collector.collect(1_700_000_100.0)
    assert set(tables) == {"kernel_events", "gpu_events"}
    store.ingest_many(tables)
    events = store.query(
        "SELECT seq, level, kind, component, code, pci_bus_id, ts_s FROM kernel_events ORDER BY seq"
    )
    assert [(e["seq"], e["kind"], e["component"], e["code"], e["pci_bus_id"]) for e in events] == [
        (10, "xid", "node0/gpu0", 79, "0000:3b:00.0"),
        (11, "xid", "node0", 48, "0000:af:00.0"),
        (12, "link", "node0/nic0", 0, "0000:5e:00.0"),
        (13, "link", "node0/nic0", 1, None),
        (14, "other", "node0/nic1", None, "0000:5c:00.0"),
        (16, "thermal", "node0", 1, None),
    ]
    assert {e["ts_s"] for e in events} == {1_700_000_002.5}  # boot epoch + 2.5 s since boot
    assert events[2]["level"] == 6
    assert collector.unknown_lines == 1 and collector.last_seq == 16
    assert store.query("SELECT gpu, node, kind, xid, message FROM gpu_events") == [
        {"gpu": "node0/gpu0", "node": "node0", "kind": "xid", "xid": 79, "message": records[0].message}
    ]
    stored = store.scalar("SELECT message FROM kernel_events WHERE seq = 14")
    assert stored == records[4].message  # the raw line, never edited


def test_xids_can_stay_out_of_gpu_events() -> None:
    records = [_record(1, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.")]
    collector = KmsgCollector(
        "node0",
        "/nonexistent",
        components_by_pci=GPU_MAP,
        xid_gpu_events=False,
        reader=Records(ReadResult(records)),
    )
    assert set(collector.collect(1.0)) == {"kernel_events"}


def test_epipe_is_an_overrun_row_and_reading_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "kmsg"
    log.write_bytes(b"")
    reader = KmsgReader(log)
    answers: list[bytes | OSError] = [
        b"6,5,100,-;first\n",
        BlockingIOError(errno.EAGAIN, "again"),
        OSError(errno.EPIPE, "Broken pipe"),
        b"3,10,200,-;mlx5_core 0000:5e:00.0 ens1f0np0: Link up\n",
        BlockingIOError(errno.EAGAIN, "again"),
    ]

    def read(fd: int, size: int) -> bytes:
        answer = answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer

    reader.read_fd = read
    collector = KmsgCollector("node0", tmp_path, components_by_pci=GPU_MAP, reader=reader)
    assert collector.collect(1.0) == {} and collector.last_seq == 5  # an unknown line: counted only
    tables = collector.collect(2.0)
    (overrun,) = tables["collector_errors"].to_pylist()
    assert overrun["error"] == "overrun" and overrun["detail"].endswith("seq 6..9")
    assert [r["seq"] for r in tables["kernel_events"].to_pylist()] == [10]
    collector.close()


def test_no_kmsg_is_reported_once(tmp_path: Path) -> None:
    collector = KmsgCollector("node0", tmp_path)
    (status,) = collector.collect(1.0)["collector_errors"].to_pylist()
    assert status["error"] == "unavailable" and "kmsg unavailable" in status["detail"]
    assert collector.collect(2.0) == {}


def test_a_read_error_is_a_row() -> None:
    class Failing(Records):
        def read(self, limit: int = 4096) -> ReadResult:
            raise OSError(errno.EIO, "Input/output error")

    tables = KmsgCollector("node0", "/nonexistent", reader=Failing()).collect(1.0)
    assert [e["error"] for e in tables["collector_errors"].to_pylist()] == ["unreadable"]


def _write_kmsg(line: str) -> None:
    fd = os.open("/dev/kmsg", os.O_WRONLY)
    try:
        os.write(fd, f"<6>{line}\n".encode())  # level 6 (info); the kernel files it under facility user
    finally:
        os.close(fd)


def test_real_dev_kmsg_reads_back_what_we_write() -> None:
    require_root()
    reader, witness = KmsgReader("/dev/kmsg"), KmsgReader("/dev/kmsg")  # both at the end of the log
    try:
        before = reader.read().records + witness.read().records  # whatever the kernel logged meanwhile
        marker = f"aiops-test {uuid.uuid4()}"
        _write_kmsg(marker)
        mine = [r for r in reader.read().records if r.message == marker]
        seen = [r for r in witness.read().records if r.message == marker]
        assert len(mine) == 1 and len(seen) == 1
        assert (mine[0].level, mine[0].facility) == (6, 1)
        assert mine[0].seq == seen[0].seq  # two independent readers agree on the sequence number
        assert all(r.seq < mine[0].seq for r in before)
    finally:
        reader.close()
        witness.close()


def test_real_dev_kmsg_collector_places_a_line_in_time() -> None:
    require_root()
    collector = KmsgCollector("node0", "/", components_by_pci={"0000:00:03.0": "node0/nic0"})
    try:
        collector.collect(time.time())  # drain what came before
        line = f"aiops-test {uuid.uuid4()} 0000:00:03.0"
        _write_kmsg(line)
        tables = collector.collect(time.time())
        (row,) = [r for r in tables["kernel_events"].to_pylist() if r["message"] == line]
        assert (row["kind"], row["component"], row["pci_bus_id"], row["level"]) == (
            "other",
            "node0/nic0",
            "0000:00:03.0",
            6,
        )
        assert abs(row["ts_s"] - time.time()) < 5.0  # boot epoch + µs since boot is the wall clock
    finally:
        collector.close()
