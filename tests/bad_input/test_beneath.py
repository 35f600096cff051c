"""aiops/beneath.py: a path opened beneath a directory descriptor never leaves it, with openat2 and with the
O_NOFOLLOW walk used where openat2 is missing (both run here: the walk by turning openat2 off)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiops import beneath


@pytest.fixture(params=["openat2", "walk"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setattr(beneath, "_openat2_works", None if request.param == "openat2" else False)
    yield str(request.param)


def test_paths_beneath_open_and_every_way_out_is_refused(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "root"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("inside")
    (tmp_path / "secret.txt").write_text("outside")
    (root / "abs-link").symlink_to(tmp_path / "secret.txt")
    (root / "climb").symlink_to("../secret.txt")
    (root / "sub" / "near").symlink_to("f.txt")
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = beneath.open_beneath(top, "sub/f.txt")
        assert os.read(fd, 100) == b"inside"
        os.close(fd)
        for escape in (
            "../secret.txt",
            "sub/../../secret.txt",
            "abs-link",
            "climb",
            str(tmp_path / "secret.txt"),
        ):
            with pytest.raises(OSError) as refused:
                beneath.open_beneath(top, escape)
            assert refused.value.errno in (errno.EXDEV, errno.ELOOP), (escape, refused.value)
        if mode == "openat2":  # a link that stays beneath is the kernel's to resolve
            fd = beneath.open_beneath(top, "sub/near")
            assert os.read(fd, 100) == b"inside"
            os.close(fd)
        else:  # the walk refuses every link
            with pytest.raises(OSError):
                beneath.open_beneath(top, "sub/near")
    finally:
        os.close(top)
