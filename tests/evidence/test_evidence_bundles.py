"""Issue 26 item 1: whole bundles (a directory, tar/tgz/zip, nvidia-bug-report.log.gz, sosreport and
must-gather layouts) are read member by member, every file recognised by its content; unknown files are
listed and skipped, none aborts the run; hostile archives are refused. The evidence inside is real: the
corpus's files (evals/real/), the H200 capture (tests/evidence_samples/) and this machine's own files."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import subprocess
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from aiops.cli.main import main
from aiops.errors import EvidenceError
from aiops.evidence import investigate
from aiops.evidence.bundle import Limits
from tests.evidence.test_investigate_inputs import measured_investigation  # the same measuring child

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "evals" / "real"
XID79 = REAL / "xid79-aer-surprise-down-tesla-2018" / "dmesg.txt"
XID48 = REAL / "xid48-dbe-xid64-gpu-operator-validator-2024" / "kern.log"
IBSTAT = REAL / "ib-port-polling-rate10-gpud-2025" / "ibstat.txt"
NVSMI_Q = REAL / "healthy-nvidia-smi-q-p8-idle-2019" / "nvidia-smi-q.txt"
PLUGIN = REAL / "device-plugin-xid69-unhealthy-2020" / "device-plugin.log"
NVSMI_TABLE = ROOT / "tests" / "evidence_samples" / "nvidia-smi-h200.txt"
PARAMS = ROOT / "tests" / "evidence_samples" / "driver-params-h200.txt"
MARKER = "_" * 44  # nvidia-bug-report.sh's section line


def _by_file(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["file"] + ("#" + s["section"] if "section" in s else ""): s for s in result["sources"]}


def _unknown_files(tmp_path: Path) -> dict[str, bytes]:
    """Files of other programs, from this machine: a config file and a binary."""
    return {
        "etc/os-release": Path("/etc/os-release").read_bytes(),
        "bin/true": Path("/bin/true").read_bytes()[:8192],
    }


def _members(tmp_path: Path) -> dict[str, bytes]:
    return {
        "node7/dmesg.txt": XID79.read_bytes(),
        "node7/nvidia-smi.txt": NVSMI_TABLE.read_bytes(),
        "node7/ibstat.txt": IBSTAT.read_bytes(),
        "node7/var/log/kern.log.1.gz": gzip.compress(XID48.read_bytes()),
        **{f"node7/{k}": v for k, v in _unknown_files(tmp_path).items()},
    }


def _tgz(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _check_mixed(result: dict[str, Any], prefix: str) -> None:
    assert result["verdict"] == "diagnosed"
    assert result["hypotheses"][0]["root_cause"] == "gpu_fell_off_bus"
    files = _by_file(result)
    assert files[f"{prefix}/node7/dmesg.txt"]["format"] == "kernel-log"
    assert files[f"{prefix}/node7/nvidia-smi.txt"]["format"] == "nvidia-smi"
    assert files[f"{prefix}/node7/ibstat.txt"]["format"] == "ib"
    assert files[f"{prefix}/node7/var/log/kern.log.1.gz"]["format"] == "kernel-log"  # gzip inside the tar
    # a readable text no parser knows is read by the generic reader (issue 37), never skipped
    assert files[f"{prefix}/node7/etc/os-release"]["format"] == "generic"
    assert files[f"{prefix}/node7/bin/true"]["format"] == "unrecognised"
    assert "binary" in files[f"{prefix}/node7/bin/true"]["reason"]
    cites = [ev["source"] for h in result["hypotheses"] for ev in h["evidence"]]
    assert f"{prefix}/node7/dmesg.txt:13" in cites


def test_a_tarball_mixing_recognised_and_unknown_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = _tgz(tmp_path / "node7.tgz", _members(tmp_path))
    assert main(["investigate", str(bundle), "--json"]) == 0
    _check_mixed(json.loads(capsys.readouterr().out), "node7.tgz")


def test_a_zip_and_a_directory_read_the_same(tmp_path: Path) -> None:
    _check_mixed(investigate([_zip(tmp_path / "node7.zip", _members(tmp_path))]), "node7.zip")
    folder = tmp_path / "bundle"
    for name, data in _members(tmp_path).items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    _check_mixed(investigate([folder]), "bundle")


def _bug_report(tmp_path: Path) -> Path:
    """An nvidia-bug-report.log.gz as nvidia-bug-report.sh writes it: one gzip member per `( ... ) | gzip -c >>`
    block, each section a 44-underscore line, an empty line and its title; the contents are real."""
    uname = " ".join(os.uname())
    cpuinfo = "".join(Path("/proc/cpuinfo").read_text().splitlines(keepends=True)[:30])
    ls = subprocess.run(["ls", "-l", "--full-time", "/proc/cpuinfo"], capture_output=True, text=True).stdout
    blocks = [
        f"{MARKER}\n\nStart of NVIDIA bug report log file.  Please include this file, along\n"
        "with a detailed description of your problem, when reporting a graphics\n"
        "driver bug via the NVIDIA Linux forum (see devtalk.nvidia.com)\n"
        "or by sending email to 'linux-bugs@nvidia.com'.\n\n"
        f"nvidia-bug-report.sh Version: 390.48\n\nDate: {time.ctime()}\nuname: {uname}\ncommand line flags: \n\n",
        f"{MARKER}\n\n*** /proc/cpuinfo\n*** ls: {ls}{cpuinfo}\n",
        f"{MARKER}\n\n*** /proc/driver/nvidia/params\n{PARAMS.read_text()}\n",
        f"{MARKER}\n\ndmesg:\n\n{XID79.read_text()}",
        f"{MARKER}\n\n/usr/bin/nvidia-smi --query\n\n{NVSMI_Q.read_text()}\n",
        f"{MARKER}\n\nEnd of NVIDIA bug report log file.\n",
    ]
    path = tmp_path / "nvidia-bug-report.log.gz"
    path.write_bytes(b"".join(gzip.compress(block.encode()) for block in blocks))
    return path


def test_an_nvidia_bug_report_is_split_into_its_sections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _bug_report(tmp_path)
    assert main(["investigate", str(report), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    sections = {s["section"]: s for s in result["sources"]}
    assert sections["dmesg"]["format"] == "kernel-log"
    assert sections["/usr/bin/nvidia-smi --query"]["format"] == "nvidia-smi-q"
    assert sections["/proc/cpuinfo"]["format"] == "generic"  # read by the generic reader
    assert sections["/proc/driver/nvidia/params"]["format"] == "driver-params"
    assert sections["Start of NVIDIA bug report log file.  Please include this file, along"]["format"] == (
        "generic"
    )
    assert result["verdict"] == "diagnosed" and result["hypotheses"][0]["root_cause"] == "gpu_fell_off_bus"
    # evidence cites the line of the whole (decompressed) log, where an operator finds it
    whole = gzip.decompress(report.read_bytes()).decode().split("\n")
    for ev in result["hypotheses"][0]["evidence"]:
        name, line = ev["source"].rsplit(":", 1)
        assert name == "nvidia-bug-report.log.gz" and whole[int(line) - 1] == ev["rows"][0]


def test_sosreport_and_must_gather_layouts_are_named(tmp_path: Path) -> None:
    sos = tmp_path / "sosreport-node7-2024-11-02-abcdef"
    must = tmp_path / "must-gather.local.5566"
    files = {
        sos / "sos_commands" / "kernel" / "dmesg": XID79,
        sos / "sos_commands" / "infiniband" / "ibstat": IBSTAT,
        sos / "etc" / "os-release": Path("/etc/os-release"),
        must
        / "namespaces/gpu-operator/pods/nvidia-device-plugin-daemonset-x2v9k/nvidia-device-plugin"
        / "nvidia-device-plugin/logs/current.log": PLUGIN,
    }
    for target, origin in files.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(origin.read_bytes())
    result = investigate([sos, must])
    files_out = _by_file(result)
    dmesg = files_out[f"{sos.name}/sos_commands/kernel/dmesg"]
    assert dmesg["format"] == "kernel-log" and dmesg["layout"] == "sosreport"
    assert files_out[f"{sos.name}/sos_commands/infiniband/ibstat"]["format"] == "ib"
    assert files_out[f"{sos.name}/etc/os-release"]["format"] == "generic"
    plugin = next(s for s in result["sources"] if s["file"].endswith("current.log"))
    assert plugin["format"] == "gpu-agent-log" and plugin["layout"] == "must-gather"
    # a sosreport as it is handed over: one .tar.xz
    packed = tmp_path / f"{sos.name}.tar.xz"
    with tarfile.open(packed, "w:xz") as tar:
        tar.add(sos, arcname=sos.name)
    again = _by_file(investigate([packed]))
    assert again[f"{packed.name}/{sos.name}/sos_commands/kernel/dmesg"]["layout"] == "sosreport"
    assert again[f"{packed.name}/{sos.name}/sos_commands/kernel/dmesg"]["format"] == "kernel-log"


def _hostile_tar(path: Path) -> Path:
    good = XID79.read_bytes()
    with tarfile.open(path, "w:gz") as tar:
        for name in ("dmesg.txt", "../escape.log", "/etc/abs.log"):
            info = tarfile.TarInfo(name)
            info.size = len(good)
            tar.addfile(info, io.BytesIO(good))
        for name, kind, target in (
            ("passwd", tarfile.SYMTYPE, "/etc/passwd"),
            ("hard", tarfile.LNKTYPE, "dmesg.txt"),
            ("null", tarfile.CHRTYPE, ""),
            ("pipe", tarfile.FIFOTYPE, ""),
        ):
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, target
            tar.addfile(info)
        inner = io.BytesIO()
        with tarfile.open(fileobj=inner, mode="w") as nested:
            info = tarfile.TarInfo("x.log")
            info.size = len(good)
            nested.addfile(info, io.BytesIO(good))
        info = tarfile.TarInfo("nested.tar")
        info.size = len(inner.getvalue())
        tar.addfile(info, io.BytesIO(inner.getvalue()))
    return path


def test_hostile_tar_members_are_refused_and_listed(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    result = investigate([_hostile_tar(work / "h.tgz")])
    files = _by_file(result)
    assert result["verdict"] == "diagnosed"  # the one good member is still read
    assert "unsafe path" in files["h.tgz/../escape.log"]["reason"]
    assert "unsafe path" in files["h.tgz//etc/abs.log"]["reason"]
    assert "a link to '/etc/passwd'" in files["h.tgz/passwd"]["reason"]
    assert "a link to 'dmesg.txt'" in files["h.tgz/hard"]["reason"]
    assert "device, FIFO" in files["h.tgz/null"]["reason"] and "device, FIFO" in files["h.tgz/pipe"]["reason"]
    assert "archive inside a bundle" in files["h.tgz/nested.tar"]["reason"]
    assert all(files[k]["format"] == "refused" for k in files if not k.endswith("dmesg.txt"))
    assert not (tmp_path / "escape.log").exists() and sorted(p.name for p in work.iterdir()) == ["h.tgz"]


def test_hostile_zip_members_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "h.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("dmesg.txt", XID79.read_bytes())
        archive.writestr("../../escape.log", XID79.read_bytes())
        link = zipfile.ZipInfo("passwd")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(link, "/etc/passwd")
    files = _by_file(investigate([path]))
    assert "unsafe path" in files["h.zip/../../escape.log"]["reason"]
    assert "symbolic link" in files["h.zip/passwd"]["reason"]
    assert files["h.zip/dmesg.txt"]["format"] == "kernel-log"


def _bomb_line() -> bytes:
    return XID79.read_bytes().splitlines(keepends=True)[12]  # a real Xid 79 line, repeated


def test_a_gzip_bomb_inside_a_tar_is_stopped_by_counting(tmp_path: Path) -> None:
    line = _bomb_line()
    bomb = gzip.compress(line * (64 * 1024 * 1024 // len(line)), compresslevel=9)
    assert len(bomb) < 1024 * 1024  # 64 MiB of text in under 1 MiB
    path = _tgz(tmp_path / "b.tgz", {"a/dmesg.txt": XID79.read_bytes(), "b/big.log.gz": bomb})
    start = time.monotonic()
    result = investigate([path], limits=Limits(member_bytes=8 << 20))
    assert time.monotonic() - start < 30
    refused = [s for s in result["sources"] if s["format"] == "refused"]
    assert len(refused) == 1 and "decompresses to more than 8388608 bytes" in refused[0]["reason"]
    assert result["verdict"] == "diagnosed"  # what was read before the bound is kept


def test_a_zip_bomb_is_refused_from_its_declared_size(tmp_path: Path) -> None:
    line = _bomb_line()
    path = _zip(tmp_path / "b.zip", {"big.log": line * (32 * 1024 * 1024 // len(line))})
    assert path.stat().st_size < 1024 * 1024
    with pytest.raises(EvidenceError, match=r"declares \d+ bytes, more than 8388608"):
        investigate([path], limits=Limits(member_bytes=8 << 20))


def test_member_count_and_time_are_bounded(tmp_path: Path) -> None:
    path = _tgz(tmp_path / "many.tgz", {f"m{i}/dmesg.txt": XID79.read_bytes() for i in range(10)})
    result = investigate([path], limits=Limits(members=3))
    assert [s["format"] for s in result["sources"]] == ["kernel-log"] * 3 + ["refused"]
    assert "more than 3 members" in result["sources"][-1]["reason"]
    with pytest.raises(EvidenceError, match="reading took more than 0 s"):
        investigate([path], limits=Limits(seconds=0.0))


def test_a_directory_bundle_does_not_follow_links_or_open_fifos(tmp_path: Path) -> None:
    folder = tmp_path / "bundle"
    folder.mkdir()
    (folder / "dmesg.txt").write_bytes(XID79.read_bytes())
    (folder / "passwd").symlink_to("/etc/passwd")
    (folder / "etc").symlink_to("/etc", target_is_directory=True)
    os.mkfifo(folder / "pipe")
    result = investigate([folder])
    files = _by_file(result)
    assert (
        "symbolic link" in files["bundle/passwd"]["reason"]
        and "symbolic link" in files["bundle/etc"]["reason"]
    )
    assert "not a regular file" in files["bundle/pipe"]["reason"]
    assert result["verdict"] == "diagnosed"


def test_a_bundle_with_nothing_readable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Only binary and empty members: nothing can be read as text (a readable text of another program is read
    by the generic reader, issue 37)."""
    path = _tgz(tmp_path / "junk.tgz", {"bin/true": _unknown_files(tmp_path)["bin/true"], "empty.log": b""})
    assert main(["investigate", str(path), "--json"]) == 2
    err = capsys.readouterr().err
    assert "nothing could be read" in err and str(path) in err and "kernel-log" in err


# A 16 MiB kernel log inside a tgz: read whole it would cost the file's size several times over; streamed
# member by member, peak RSS stays near the interpreter's own (the plain-file bound and measuring child of
# tests/evidence/test_investigate_inputs.py). Measured (2026-12-07): streamed, the growth is ~3 MB; the member read
# whole (`io.BytesIO(inner.read())` in aiops/evidence/bundle.py `_tar`) ~33 MB, and its bytes alone would be 16
# MiB more than streamed: both over TGZ_GROWTH_LIMIT_MB. (32 MiB, judged against 32 MB, until 2026-12-07: the same
# proof at twice the gzip and parsing CPU.)
TGZ_BYTES = 16 * 1024 * 1024
TGZ_GROWTH_LIMIT_MB = 16


@pytest.mark.timeout(180)
def test_a_large_tgz_is_streamed_in_bounded_memory(tmp_path: Path) -> None:
    block = b"".join(p.read_bytes() for p in (XID79, XID48)) * 256
    big = tmp_path / "big.tgz"
    size = TGZ_BYTES
    with tarfile.open(big, "w:gz", compresslevel=1) as tar:
        info = tarfile.TarInfo("var/log/dmesg")
        info.size = (size // len(block) + 1) * len(block)
        reader = io.BufferedReader(_Repeat(block, info.size))  # type: ignore[arg-type]
        tar.addfile(info, reader)
    report = measured_investigation(big, timeout_s=170)
    source = report["result"]["sources"][0]
    assert source["format"] == "kernel-log" and source["lines"] > 150_000
    assert report["result"]["verdict"] == "diagnosed"
    # the growth while reading (whole, the member alone would add ~33 MB), and the product's 300 MB peak
    assert report["growth_mb"] <= TGZ_GROWTH_LIMIT_MB and report["peak_rss_mb"] <= 300, report


class _Repeat(io.RawIOBase):
    """`block` repeated up to `total` bytes, produced as it is read (the test file is not held in memory)."""

    def __init__(self, block: bytes, total: int) -> None:
        self._block, self._left, self._at = block, total, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        size = min(len(buffer), self._left, len(self._block) - self._at)
        buffer[:size] = self._block[self._at : self._at + size]
        self._at = (self._at + size) % len(self._block)
        self._left -= size
        return size
