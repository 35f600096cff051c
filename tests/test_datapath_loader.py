"""The loader finds the C sources as package data of `bpf` (importlib.resources), not beside the checkout."""

from __future__ import annotations

from aiops.datapath.lanes import SOURCE_FILES, source_sha256
from aiops.datapath.loader import source_dir, source_file


def test_bpf_sources_are_package_data_of_bpf() -> None:
    directory = source_dir()
    assert directory.name == "bpf"
    for name in (*SOURCE_FILES, "tcp_probe.bpf.c", "empty.bpf.c"):
        assert (directory / name).is_file(), name
        assert source_file(name).read_bytes() == (directory / name).read_bytes()
    assert len(source_sha256()) == 64
