"""Packing and delivering a job's workdir (providers.workdir), on real folders, real git
and real tar/gzip."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from providers.workdir import (
    PackedWorkdir,
    WorkdirError,
    archive_digest,
    deliver_workdir,
    pack_workdir,
    workdir_files,
)
from tests.fakes.gitrepo import isolate_git

LIMIT = 10_000_000


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def members(packed: PackedWorkdir) -> list[str]:
    with tarfile.open(packed.archive, "r:gz") as tar:
        return sorted(tar.getnames())


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path, monkeypatch) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    isolate_git(monkeypatch)
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    return root


def test_in_a_git_work_tree_only_what_git_keeps_is_packed(repo, tmp_path):
    write(
        repo,
        {
            ".gitignore": "data/\n*.ckpt\n",
            "src/train.py": "print('hi')\n",
            "src/notes.txt": "untracked but not ignored\n",
            "src/model.ckpt": "ignored\n",
            "src/data/big.bin": "ignored folder\n",
            "src/.hidden": "kept\n",
        },
    )
    git(repo, "add", ".gitignore", "src/train.py")
    git(repo, "commit", "-q", "-m", "x")
    packed = pack_workdir(repo / "src", tmp_path / "archives", LIMIT)
    assert members(packed) == [".hidden", "notes.txt", "train.py"]
    assert packed.files == 3 and packed.archive.name == f"{packed.digest}.tar.gz"


def test_a_folder_git_ignores_as_a_whole_is_packed_in_full(repo, tmp_path):
    """An installed package inside a virtual environment inside a repository."""
    write(repo, {".gitignore": ".venv/\n", ".venv/lib/demo/train.py": "x\n"})
    write(repo, {".venv/lib/demo/demo/job.yaml": "y\n"})
    packed = pack_workdir(repo / ".venv" / "lib" / "demo", tmp_path / "a", LIMIT)
    assert members(packed) == ["demo/job.yaml", "train.py"]


def test_outside_git_every_file_and_link_is_packed(tmp_path):
    folder = tmp_path / "plain"
    write(folder, {"a.py": "a", "sub/b.txt": "b", ".env.example": "c"})
    os.symlink("a.py", folder / "link.py")
    os.symlink("sub", folder / "linkdir")
    assert workdir_files(folder) == [".env.example", "a.py", "link.py", "linkdir", "sub/b.txt"]
    packed = pack_workdir(folder, tmp_path / "a", LIMIT)
    out = deliver_workdir(packed.uri, tmp_path / "out")
    assert (out / "link.py").is_symlink() and (out / "link.py").read_text() == "a"
    assert (out / "linkdir" / "b.txt").read_text() == "b"


def test_a_link_out_of_the_workdir_is_refused(tmp_path):
    folder = tmp_path / "w"
    write(folder, {"a.py": "a"})
    os.symlink("/etc/passwd", folder / "passwd")
    with pytest.raises(WorkdirError, match="outside the workdir"):
        pack_workdir(folder, tmp_path / "a", LIMIT)


def test_same_files_pack_to_the_same_archive_whatever_their_times(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    for folder in (one, two):
        write(folder, {"train.py": "print(1)\n", "cfg/x.yaml": "a: 1\n"})
    os.utime(two / "train.py", (1_000_000, 1_000_000))
    first = pack_workdir(one, tmp_path / "a", LIMIT)
    assert pack_workdir(two, tmp_path / "a", LIMIT).digest == first.digest
    (two / "train.py").write_text("print(2)\n")
    assert pack_workdir(two, tmp_path / "a", LIMIT).digest != first.digest
    os.chmod(one / "train.py", 0o755)
    assert pack_workdir(one, tmp_path / "a", LIMIT).digest != first.digest  # modes count


def test_over_the_limit_names_the_folder_its_size_and_the_limit(tmp_path):
    folder = tmp_path / "big"
    write(folder, {"a.bin": "x" * 600_000, "b.bin": "y" * 600_000})
    with pytest.raises(WorkdirError) as caught:
        pack_workdir(folder, tmp_path / "a", 1_000_000)
    message = str(caught.value)
    assert str(folder) in message and "1.2 MB" in message and "1.0 MB limit" in message
    assert not (tmp_path / "a").exists()  # refused before anything is written


def test_delivery_checks_the_archive_against_its_name(tmp_path):
    folder = tmp_path / "w"
    write(folder, {"a.py": "a"})
    packed = pack_workdir(folder, tmp_path / "a", LIMIT)
    tampered = tmp_path / "t" / packed.archive.name
    tampered.parent.mkdir()
    data = bytearray(packed.archive.read_bytes())
    data[-9] ^= 0xFF
    tampered.write_bytes(bytes(data))
    with pytest.raises(WorkdirError, match="does not match its sha256"):
        deliver_workdir(tampered.as_uri(), tmp_path / "out")
    with pytest.raises(WorkdirError, match="not a packed workdir"):
        archive_digest("file:///tmp/x.tar.gz")


NAMES = st.lists(st.from_regex(r"[a-z]{1,6}(/[a-z]{1,6}){0,2}\.(py|txt)", fullmatch=True))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=NAMES.map(lambda names: sorted(set(names))), data=st.data())
def test_delivered_files_are_the_packed_files(tmp_path_factory, names, data):
    root = tmp_path_factory.mktemp("rt")
    folder = root / "w"
    folder.mkdir()
    # Folders have no dot and files do: no name is both.
    files = {name: data.draw(st.text(max_size=200), label=name) for name in names}
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    packed = pack_workdir(folder, root / "a", LIMIT)
    out = deliver_workdir(packed.uri, root / "out")
    got = {str(p.relative_to(out)): p.read_bytes().decode() for p in out.rglob("*") if p.is_file()}
    assert got == files
