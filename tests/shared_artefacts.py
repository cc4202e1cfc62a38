"""Artefacts that several test files need (tokenizers, tiny fine-tuned models, their exports), built once per test
run and shared by pytest-xdist's workers.

`built_once(tmp_path_factory, name, build, **key)` builds `build(folder)` the first time any worker asks for
(name, key) and returns the same folder to every later asker, in that worker or the other: a file lock serializes
the build, the folder is built under a temporary name and renamed when whole (no reader sees half of it), then
made read-only, so that a test that writes into it fails instead of changing what the next file reads (a test
that must write copies it first). The folder lives beside the workers' own temporary folders, so that it goes when
pytest removes old runs; nothing is shared between runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import stat


def _shared_root(tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's basetemp is RUN/popen-gwN; RUN is the run's own folder, common to the workers.
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    return root


def _read_only(folder):
    """Takes the write bits off every file and folder under `folder` (bottom-up, so a folder's entries go first)."""
    for path, _, files in os.walk(folder, topdown=False):
        for full in [os.path.join(path, name) for name in files] + [path]:
            os.chmod(full, os.stat(full).st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def built_once(tmp_path_factory, name, build, **key):
    """`build(folder)` (which fills the empty `folder`) run once per test run for (`name`, `key`) -> the built folder
    (a pathlib.Path, read-only). `key` holds what the artefact is made from (JSON-able values)."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    root = _shared_root(tmp_path_factory)
    final = root / f"{name}-{digest}"
    with open(root / f"{name}-{digest}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not final.exists():
            building = root / f".{name}-{digest}.building-{os.getpid()}"
            shutil.rmtree(building, ignore_errors=True)
            building.mkdir()
            build(building)
            _read_only(building)
            os.rename(building, final)
            print(f"\nshared artefact {final.name}: built by worker {os.environ.get('PYTEST_XDIST_WORKER', 'main')}")
        else:
            print(f"\nshared artefact {final.name}: reused")
    return final

