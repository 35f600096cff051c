"""Bundles: a directory, a tar/tgz/txz/zip archive or a gzip file, opened as a stream of entries, each a
byte stream read once, in order. Nothing is extracted to disk.

Hostile archives are refused, not trusted: a member whose path is absolute or climbs out (`..`), a link, a
device or FIFO, an encrypted zip member or an archive inside an archive is listed with its reason and never
read; decompressed bytes are counted as they are read (per member and for the whole bundle, whatever the
header claims), as are members and seconds, and `BundleLimit` stops the bundle when one is spent (a zip
member whose declared size already breaks the limit is refused before it is opened). Layouts that bundles
follow (a sosreport, a Kubernetes must-gather) are named from their known paths; every file is still
recognised by its content (aiops/evidence/detect.py)."""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
import os
import re
import stat
import tarfile
import time
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from aiops.errors import BundleLimit

GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGICS = (b"PK\x03\x04", b"PK\x05\x06")
XZ_MAGIC = b"\xfd7zXZ\x00"
BZ2_MAGIC = b"BZh"
TAR_MAGIC_AT = 257  # "ustar" in a POSIX tar header
# Errors a corrupt or truncated archive raises while it is read.
ARCHIVE_ERRORS = (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error, lzma.LZMAError, OSError)


@dataclass(frozen=True)
class Limits:
    """Bounds on what one bundle may cost. Plain files given directly are streamed whatever their size (as
    before); these bound what is decompressed or walked."""

    members: int = 10_000  # entries listed (read or refused) per bundle
    member_bytes: int = 4 << 30  # decompressed bytes of one member
    total_bytes: int = 16 << 30  # decompressed bytes of one bundle
    seconds: float = 900.0  # wall time reading one bundle


@dataclass
class Budget:
    limits: Limits
    started_s: float = field(default_factory=time.monotonic)
    total_bytes: int = 0
    members: int = 0

    def member(self) -> None:
        self.members += 1
        if self.members > self.limits.members:
            raise BundleLimit(f"more than {self.limits.members} members")
        self.clock()

    def clock(self) -> None:
        if time.monotonic() - self.started_s > self.limits.seconds:
            raise BundleLimit(f"reading took more than {self.limits.seconds:g} s")


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class Counted(io.RawIOBase):
    """A read-only stream that counts the bytes read from `inner` against the member and bundle budgets."""

    def __init__(self, inner: Readable, budget: Budget | None) -> None:
        self._inner = inner
        self._budget = budget
        self.read_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        data = self._inner.read(len(buffer))
        size = len(data)
        buffer[:size] = data
        self.read_bytes += size
        if self._budget is not None and size:
            self._budget.total_bytes += size
            limits = self._budget.limits
            if self.read_bytes > limits.member_bytes:
                raise BundleLimit(f"a member decompresses to more than {limits.member_bytes} bytes")
            if self._budget.total_bytes > limits.total_bytes:
                raise BundleLimit(f"the bundle decompresses to more than {limits.total_bytes} bytes")
            self._budget.clock()
        return size


@dataclass
class Entry:
    """One file of a bundle: `name` as evidence cites it, and either `stream` (read it before asking for the
    next entry) or `skipped`, the reason it was not read."""

    name: str
    stream: BinaryIO | None = None
    skipped: str | None = None
    layout: str | None = None
    budget: Budget | None = None


# Known layouts, from paths inside them: sos (sosreport: sos_commands/<plugin>/<command>, var/log/...),
# oc/kubectl must-gather (namespaces/<ns>/pods/<pod>/<container>/<container>/logs/current.log,
# cluster-scoped-resources/...).
_LAYOUTS = (
    ("sosreport", re.compile(r"(?:^|/)(?:sos_commands|sos_reports|sos_logs)/")),
    ("must-gather", re.compile(r"(?:^|/)(?:namespaces/[^/]+/pods/|cluster-scoped-resources/)")),
)


def layout_of(member: str) -> str | None:
    return next((name for name, pattern in _LAYOUTS if pattern.search(member)), None)


def unsafe_name(member: str) -> bool:
    """Absolute, drive-lettered or climbing out of the bundle: refused even though nothing is extracted."""
    if member.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", member):
        return True
    return ".." in PurePosixPath(member.replace("\\", "/")).parts


def sniff_kind(head: bytes) -> str:
    """`zip`, `tar`, `gzip`, `xz`, `bz2` or `plain`, from a file's first bytes."""
    if head.startswith(ZIP_MAGICS):
        return "zip"
    if head[TAR_MAGIC_AT : TAR_MAGIC_AT + 5] == b"ustar":
        return "tar"
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(XZ_MAGIC):
        return "xz"
    if head.startswith(BZ2_MAGIC):
        return "bz2"
    return "plain"


def _decompressed_head(path: Path, kind: str) -> bytes:
    try:
        with path.open("rb") as raw:
            return decompressed(raw, kind, None).read(TAR_MAGIC_AT + 8)
    except ARCHIVE_ERRORS:
        return b""


def is_bundle(path: Path) -> bool:
    """A directory, an archive (tar in any compression, zip); a lone gzip file is not a bundle (it is read as
    the text it holds)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    if stat.S_ISDIR(mode):
        return True
    if not stat.S_ISREG(mode):  # a FIFO would block the open
        return False
    try:
        with path.open("rb") as handle:
            head = handle.read(TAR_MAGIC_AT + 8)
    except OSError:
        return False
    kind = sniff_kind(head)
    if kind in ("zip", "tar"):
        return True
    if kind in ("gzip", "xz", "bz2"):
        return sniff_kind(_decompressed_head(path, kind)) == "tar"
    return False


def entries(path: Path, name: str, limits: Limits) -> Iterator[Entry]:
    """The entries of the bundle at `path` (cited as `name/member`); raises BundleLimit when a bound is
    reached and the ARCHIVE_ERRORS of a corrupt archive."""
    budget = Budget(limits)
    if path.is_dir():
        yield from _directory(path, name, budget)
        return
    with path.open("rb") as handle:
        head = handle.read(TAR_MAGIC_AT + 8)
    if sniff_kind(head) == "zip":
        yield from _zip(path, name, budget)
    else:
        yield from _tar(path, name, budget)


def _directory(root: Path, name: str, budget: Budget) -> Iterator[Entry]:
    """Every file under `root`, each opened beneath its folder's descriptor (`os.fwalk`, which opens each
    folder from its parent's descriptor and checks it is the one listed) with O_NOFOLLOW, then checked on the
    descriptor: a file swapped for a link (or a FIFO, a device) between the listing and the open is refused,
    never followed out of the bundle (issue 36, medium 1: the walker lstat-ed a name and opened it later)."""
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)  # the folder itself, once
    try:
        yield from _walk(top, name, budget)
    finally:
        os.close(top)


def _walk(top: int, name: str, budget: Budget) -> Iterator[Entry]:
    for folder, dirs, files, folder_fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
        dirs.sort()
        links = sorted(d for d in dirs if _is_link(d, folder_fd))
        for file in sorted(files) + links:
            rel = PurePosixPath(folder, file).as_posix().removeprefix("./")
            cited = f"{name}/{rel}"
            budget.member()
            try:
                fd = os.open(
                    file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder_fd
                )
            except OSError as exc:
                why = "a symbolic link (not followed)" if exc.errno == errno.ELOOP else None
                yield Entry(
                    cited, skipped=why or f"cannot read: {exc.strerror or exc}", layout=layout_of(rel)
                )
                continue
            handle = os.fdopen(fd, "rb")
            with handle:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    yield Entry(cited, skipped="not a regular file", layout=layout_of(rel))
                    continue
                if _is_archive(handle):
                    yield Entry(cited, skipped="an archive inside a bundle (give it on its own)")
                    continue
                yield Entry(cited, stream=handle, layout=layout_of(rel), budget=budget)  # type: ignore[arg-type]
        dirs[:] = [d for d in dirs if d not in links]


def _is_link(entry: str, folder_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(entry, dir_fd=folder_fd).st_mode)
    except OSError:
        return False


def _is_archive(handle: BinaryIO) -> bool:
    """A zip or tar, plain or compressed, from an open file's first bytes (the handle is rewound)."""
    head = handle.read(TAR_MAGIC_AT + 8)
    handle.seek(0)
    kind = sniff_kind(head)
    if kind in ("gzip", "xz", "bz2"):
        try:
            inner = decompressed(handle, kind, None).read(TAR_MAGIC_AT + 8)  # type: ignore[arg-type]
        except ARCHIVE_ERRORS:
            inner = b""
        handle.seek(0)
        kind = sniff_kind(inner)
    return kind in ("zip", "tar")


def _tar(path: Path, name: str, budget: Budget) -> Iterator[Entry]:
    with path.open("rb") as raw, tarfile.open(fileobj=raw, mode="r|*") as archive:
        for member in archive:
            if member.isdir():
                continue
            budget.member()
            cited = f"{name}/{member.name}"
            layout = layout_of(member.name)
            if unsafe_name(member.name):
                yield Entry(cited, skipped="unsafe path (absolute or '..'): refused", layout=layout)
            elif member.issym() or member.islnk():
                yield Entry(cited, skipped=f"a link to {member.linkname!r}: refused", layout=layout)
            elif not member.isfile():
                yield Entry(cited, skipped="a device, FIFO or special file: refused", layout=layout)
            else:
                inner = archive.extractfile(member)
                if inner is None:
                    yield Entry(cited, skipped="not a regular file", layout=layout)
                    continue
                yield Entry(cited, stream=_counted(inner, budget), layout=layout, budget=budget)


def _zip(path: Path, name: str, budget: Budget) -> Iterator[Entry]:
    limits = budget.limits
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            budget.member()
            cited = f"{name}/{info.filename}"
            layout = layout_of(info.filename)
            kind = (info.external_attr >> 16) & 0o170000
            if unsafe_name(info.filename):
                yield Entry(cited, skipped="unsafe path (absolute or '..'): refused", layout=layout)
            elif kind == stat.S_IFLNK:
                yield Entry(cited, skipped="a symbolic link: refused", layout=layout)
            elif kind not in (0, stat.S_IFREG):
                yield Entry(cited, skipped="a device, FIFO or special file: refused", layout=layout)
            elif info.flag_bits & 0x1:
                yield Entry(cited, skipped="encrypted: not read", layout=layout)
            elif info.file_size > limits.member_bytes:
                raise BundleLimit(
                    f"{info.filename} declares {info.file_size} bytes, more than {limits.member_bytes}"
                )
            else:
                with archive.open(info) as inner:
                    yield Entry(cited, stream=_counted(inner, budget), layout=layout, budget=budget)


def _counted(inner: Readable, budget: Budget) -> BinaryIO:
    return io.BufferedReader(Counted(inner, budget))  # type: ignore[return-value]


def decompressed(data: BinaryIO, kind: str, budget: Budget | None) -> BinaryIO:
    """The text inside a gzip/xz/bz2 stream (gzip: all its members, as nvidia-bug-report.sh appends one per
    section), its bytes counted against `budget`."""
    # The decompressor is closed with the stream that wraps it (the caller's `with`).
    inner: Readable
    if kind == "gzip":
        inner = gzip.GzipFile(fileobj=data, mode="rb")
    elif kind == "xz":
        inner = lzma.LZMAFile(data, mode="rb")  # noqa: SIM115
    else:
        inner = bz2.BZ2File(data, mode="rb")
    return io.BufferedReader(Counted(inner, budget), buffer_size=1 << 16)  # type: ignore[return-value]
