"""Files written whole or not at all, and a full disk said in one line."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from slurm_arnold.errors import StateError
from slurm_arnold.files import write_atomically


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (a real full file system; root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mount = tmp_path / "small"
    mount.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "arnoldtest", str(mount)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_written_whole_with_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "a.rankorder"
    write_atomically(path, "one\n", 0o640)
    assert path.read_text() == "one\n" and path.stat().st_mode & 0o777 == 0o640
    write_atomically(path, "two\n")
    assert path.read_text() == "two\n" and list(tmp_path.iterdir()) == [path]


def test_a_full_disk_names_the_file_and_leaves_nothing(small_fs: Path) -> None:
    path = small_fs / "a.rankorder"
    write_atomically(path, "kept\n")
    with pytest.raises(StateError) as err:
        write_atomically(path, "x" * 1_000_000)
    assert str(err.value) == (f"{path}: cannot write it: the file system is full; free space "
                              "there (`df` names it) and run again")
    assert path.read_text() == "kept\n" and list(small_fs.iterdir()) == [path]
