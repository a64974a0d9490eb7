"""The one atomic writer (costlab.common.files) and the work dir's JSON state files (costlab.export.workdir)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from costlab.common.errors import InputError
from costlab.common.files import atomic_file, write_atomically
from costlab.export.workdir import read_state, write_state


def test_write_atomically_keeps_the_mode_writes_through_links_and_leaves_no_debris(tmp_path):
    path = tmp_path / "a.json"
    write_atomically(path, b"one")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~_umask()  # a plain open's mode, not mkstemp's 0o600
    os.chmod(path, 0o640)
    write_atomically(path, [b"t", b"wo"])
    assert path.read_bytes() == b"two" and stat.S_IMODE(os.stat(path).st_mode) == 0o640
    link = tmp_path / "link.json"
    link.symlink_to("a.json")
    write_atomically(link, b"three")
    assert link.is_symlink() and path.read_bytes() == b"three"
    with pytest.raises(KeyboardInterrupt):
        with atomic_file(path) as fh:
            fh.write(b"half")
            raise KeyboardInterrupt
    assert path.read_bytes() == b"three"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "link.json"]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_state_files_round_trip_and_damage_names_the_file(tmp_path):
    path = tmp_path / "transfer.json"
    assert read_state(path, "transfer afresh", {"tasks": {}}, key="tasks") == {"tasks": {}}
    write_state(path, {"tasks": {"a": {"n": 1}}})
    assert read_state(path, "transfer afresh", {}, key="tasks") == {"tasks": {"a": {"n": 1}}}
    path.write_text("{not json")
    with pytest.raises(InputError, match=r"is damaged \(JSONDecodeError\); remove it to transfer afresh"):
        read_state(path, "transfer afresh", {}, key="tasks")
    path.write_text('{"tasks": []}')
    with pytest.raises(InputError, match=r"is damaged \(no 'tasks' object\); remove it to transfer afresh"):
        read_state(path, "transfer afresh", {}, key="tasks")
    path.write_text("[]")
    with pytest.raises(InputError, match=r"is damaged \(not a JSON object\); remove it to start exploitation afresh"):
        read_state(path, "start exploitation afresh", {})


def test_files_written_together_are_replaced_whole_when_a_signal_comes_between_their_renames(tmp_path, monkeypatch):
    """A model's weights and config: Ctrl-C arriving during the first rename waits until the second is done, so
    the pair is the new one (never new weights beside the old config), then interrupts."""
    import signal

    from costlab.common.files import write_together

    a, b = tmp_path / "config.json", tmp_path / "model.safetensors"
    a.write_bytes(b"old config")
    b.write_bytes(b"old weights")
    rename = os.replace
    calls = []

    def interrupted_rename(src, dst):
        rename(src, dst)
        calls.append(Path(dst).name)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", interrupted_rename)
    # Ctrl-C's handler as in a terminal: a shell starts a background job (a suite run with `&`) with SIGINT ignored
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            write_together({a: b"new config", b: b"new weights"})
    finally:
        signal.signal(signal.SIGINT, previous)
    assert calls == ["model.safetensors", "config.json"]
    assert a.read_bytes() == b"new config" and b.read_bytes() == b"new weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]


def test_files_written_together_are_unchanged_when_one_cannot_be_synced(tmp_path, monkeypatch):
    """A full disk (or a quota reported at the sync) while a model's config is written: the old
    pair stays whole (never new weights beside the old config) and no temporary file is left."""
    import errno

    from costlab.common.files import write_together

    a, b = tmp_path / "config.json", tmp_path / "model.safetensors"
    a.write_bytes(b"old config")
    b.write_bytes(b"old weights")
    sync = os.fsync

    def full_at_the_config(fd):
        if ".config.json.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return sync(fd)

    monkeypatch.setattr(os, "fsync", full_at_the_config)
    with pytest.raises(OSError, match="No space left"):
        write_together({a: b"new config", b: b"new weights"})
    assert a.read_bytes() == b"old config" and b.read_bytes() == b"old weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "model.safetensors"]
