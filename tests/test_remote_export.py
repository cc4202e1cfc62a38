"""Exports on a remote store and a server polling it (ram://, TensorFlow's in-memory filesystem, stands in for
gs://: both go through tf.io.gfile, and neither has a directory rename).

* `export_model(..., export_base="ram://...")` stages locally, publishes file by file with saved_model.pb
  last, writes nothing under the working directory, numbers versions from what is on ram://, and the
  in-process `xlnet-tf serve` serves the ram:// base (gRPC Predict == the SavedModel called in process).
* A server polling a ram:// base while a version is published file by file never loads nor reports it before
  its saved_model.pb lands, then serves it; the same copy with saved_model.pb FIRST is seen early (the
  negative control: the check can fail).
* The exporter's publication paused at every step of its copy (ram:// shows a file while it is written, 128 KiB
  at a time), the server polling once at each pause: the version is neither loaded nor reported until every
  file is there whole, and is loaded at the first poll after (deterministic: no poller thread, no sleeps).

Every checked figure is printed with its bound (run with -s to see them).
"""

from __future__ import annotations

import os
import re
import time
import uuid

import numpy as np
import pytest

TOLERANCE = 1e-5
TEXTS = ["Le café « Zoë » sert une crème brûlée.", "XLNet is a generalized autoregressive pretraining method.",
         "", "naïve résumé — “smart quotes” 🙂 " * 6]
SAVED_MODEL = "saved_model.pb"


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def _ram_root():
    # Unique and not a prefix of another test's names (ram:// lists "base2" among the children of "base").
    return f"ram://xlnet-remote-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory):
    """A tiny fine-tuned classification directory (random weights), local, as `xlnet-tf finetune` writes it."""
    from conftest import tiny_finetuned_classifier
    from xlnet_tf.config import XLNetConfig

    config = XLNetConfig(n_token=400, d_model=16, n_layer=1, n_head=2, d_head=8, d_inner=32)
    return tiny_finetuned_classifier(tmp_path_factory.mktemp("remote_export"), TEXTS, config, 24, 321)


@pytest.fixture(scope="module")
def exported(finetuned, tmp_path_factory):
    """The version exported to a ram:// base: {base, path, cwd entries, tmp entries, seconds}."""
    from xlnet_tf.export.exporter import TMP_PREFIX, export_model

    cwd = tmp_path_factory.mktemp("cwd")
    staging_root = tmp_path_factory.mktemp("system_tmp")
    base = _ram_root() + "/exports/cls"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)  # an empty working directory: nothing may appear in it (os.path.abspath("ram://..."))
        patch.setattr("tempfile.tempdir", str(staging_root))  # where the local staging goes
        started = time.monotonic()
        path = export_model(finetuned, base)
        seconds = time.monotonic() - started
    return {"base": base, "path": path, "cwd": sorted(os.listdir(cwd)), "seconds": seconds,
            "staging_left": sorted(n for n in os.listdir(staging_root) if n.startswith(TMP_PREFIX))}


@pytest.fixture(scope="module")
def reference(exported):
    """serving_default of the ram:// export, loaded in process with tf.saved_model.load."""
    import tensorflow as tf

    function = tf.saved_model.load(exported["path"]).signatures["serving_default"]
    return {k: v.numpy() for k, v in function(text=tf.constant(TEXTS)).items()}


def _compare(label, got, want, bound=TOLERANCE):
    assert sorted(got) == sorted(want), (label, sorted(got), sorted(want))
    worst = 0.0
    for name, expected in want.items():
        value = np.asarray(got[name])
        assert value.shape == expected.shape, (label, name, value.shape, expected.shape)
        if expected.dtype == object:
            assert [v if isinstance(v, bytes) else v.encode() for v in value.reshape(-1).tolist()] == \
                expected.reshape(-1).tolist(), (label, name)
        else:
            worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - expected.astype(np.float64)))))
    check(f"{label}: max |served - in process|", f"{worst:.3g}", f"<= {bound}", worst <= bound)


def _serve(base, poll_interval=0.05, enable_warmup=True):
    from xlnet_tf.serving import serve

    return serve(model_base_path=base, model_name="cls", port=0, rest_api_port=None, poll_interval=poll_interval,
                 enable_warmup=enable_warmup).start()


@pytest.mark.slow
def test_export_to_ram_base_then_serve_it(exported, reference, finetuned, tmp_path, monkeypatch):
    from xlnet_tf import files
    from xlnet_tf.errors import UserError
    from xlnet_tf.export import exporter, signatures
    from xlnet_tf.serving import Client

    base, path = exported["base"], exported["path"]
    print(f"\n[remote export] export_model(export_base={base!r}) in {exported['seconds']:.1f}s -> {path}")
    listed = files.walk_files(path)
    for name in listed:
        print(f"    {name}: {files.size(files.join(path, name))} bytes")
    check("version directory", path, f"== {base}/1", path == f"{base}/1")
    wanted = {SAVED_MODEL, "variables/variables.index", "assets.extra/tf_serving_warmup_requests",
              "assets.extra/xlnet_export.json"}
    check("files of the version on ram://", f"{len(listed)} files", f"include {sorted(wanted)}",
          wanted <= set(listed) and any(n.startswith("variables/variables.data") for n in listed))
    check("entries written under the working directory", exported["cwd"], "== [] (nothing local)",
          exported["cwd"] == [])
    check("local staging directories left", exported["staging_left"], "== []", exported["staging_left"] == [])
    check("entries of the ram:// base", files.listdir(base), "== ['1'] (no staging directory there)",
          files.listdir(base) == ["1"])
    metadata = files.read_json(files.join(path, "assets.extra", exporter.METADATA_FILE))
    check("xlnet_export.json version", metadata["version"], "== 1", metadata["version"] == 1)

    # The in-process server on the ram:// base, named by a model config file that is on ram:// too, answers a
    # gRPC Predict as the SavedModel called in process.
    from xlnet_tf.serving import serve

    config_file = base.rsplit("/exports/", 1)[0] + "/models.config"
    files.write_text(config_file, f'model_config_list {{ config {{ name: "cls" base_path: "{base}" '
                                  f'model_platform: "tensorflow" }} }}\n')
    with pytest.raises(UserError, match="not found"):
        serve(model_config_file=config_file + ".missing", port=0, rest_api_port=None)
    print("  a missing ram:// --model-config-file: UserError 'not found'")
    server = serve(model_config_file=config_file, port=0, rest_api_port=None, poll_interval=0.05).start()
    try:
        client = Client(server.grpc_target, "cls")
        status = client.status()
        check("GetModelStatus of the ram:// base", status, "version 1 AVAILABLE",
              [(s["version"], s["state"]) for s in status] == [(1, "AVAILABLE")])
        _compare("gRPC Predict from the ram:// base", client.predict({"text": TEXTS}), reference)
        check("version that answered", client.last_version, "== 1", client.last_version == 1)
        warmed = server.manager.models["cls"].versions[1].servable.warmup_requests_run
        check("warmup requests replayed from ram:// at load", warmed, "== 4 (3 texts + one batch of them)",
              warmed == 4)
        client.close()
    finally:
        server.stop(1)

    # Versions are numbered from what is on ram://; version 2 (a stand-in root: numbering only, no tracing).
    monkeypatch.chdir(tmp_path)
    def stand_in(model, tokenizer, finetune_config, max_seq_len, packing_mode="auto"):  # a root, no tracing
        import tensorflow as tf

        return tf.Module(), {}

    monkeypatch.setattr(signatures, "build_serving_module", stand_in)
    check("next_version on the ram:// base", exporter.next_version(base), "== 2", exporter.next_version(base) == 2)
    second = exporter.export_model(finetuned, base)
    check("the next export's directory", second, f"== {base}/2", second == f"{base}/2")
    with pytest.raises(UserError, match="already exists"):
        exporter.export_model(finetuned, base, version=1)
    print("  an existing ram:// version is refused: UserError 'already exists'")

    # A copy that fails midway (after 2 files) leaves no version directory behind.
    publish = files.publish_tree
    copied = []

    def failing_publish(source, target, last=(), on_file=None):
        def on_each(name):
            copied.append(name)
            if len(copied) == 2:
                raise OSError("connection reset (simulated)")
        return publish(source, target, last=last, on_file=on_each)

    monkeypatch.setattr(files, "publish_tree", failing_publish)
    with pytest.raises(OSError, match="simulated"):
        exporter.export_model(finetuned, base)
    check("ram:// base after a copy that failed after 2 files", files.listdir(base), "== ['1', '2']",
          files.listdir(base) == ["1", "2"] and len(copied) == 2)
    check("entries written under the working directory", sorted(os.listdir(tmp_path)), "== []",
          os.listdir(tmp_path) == [])


def _local_copy(remote_dir, folder):
    """The files of a remote version directory copied to a local folder (publish_tree's source)."""
    from xlnet_tf import files

    for name in files.walk_files(remote_dir):
        files.copy(files.join(remote_dir, name), os.path.join(folder, name))
    return str(folder)


def _seen(server, client, version):
    """What the server shows of `version`: its manager state and GetModelStatus (None when unknown)."""
    from xlnet_tf.serving import ServingError

    state = server.manager.models["cls"].versions.get(version)
    try:
        reported = {s["version"]: (s["state"], s["error_message"][:80]) for s in client.status()}.get(version)
    except ServingError as error:  # NOT_FOUND: no version known at all
        reported = None if error.code.name == "NOT_FOUND" else f"error {error.code.name}"
    return (None if state is None else (state.state, state.error and state.error.message[:80])), reported


def _publish_watched(server, client, source, target, version, last, settle=0.12, poll_after=None):
    """Publishes `source` as `target` file by file. After each file (or only those in `poll_after`) the server
    polls: its own poller (if it has one) for `settle` seconds while what it shows of `version` is looked at,
    then once explicitly (`poll_once`), looked at again. Returns ([(file, what was seen)], {file: time})."""
    from xlnet_tf import files

    seen, landed = [], {}

    def on_file(name):
        landed[name] = time.monotonic()
        if poll_after is not None and name not in poll_after:
            return
        deadline = time.monotonic() + settle
        while time.monotonic() < deadline:
            seen.append((name, _seen(server, client, version)))
            time.sleep(0.02)
        server.manager.poll_once()
        seen.append((name, _seen(server, client, version)))

    files.publish_tree(source, target, last=last, on_file=on_file)
    return seen, landed


def _available_after(server, version, since, limit=30.0):
    """Seconds from `since` to the manager's 'available' event of `version` (None if not within `limit`)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        times = [e[0] for e in list(server.manager.events) if e[1] == "cls" and e[2] == version
                 and e[3] == "available"]
        if times:
            return times[0] - since
        time.sleep(0.05)
    return None


def test_poller_never_sees_a_version_before_its_saved_model_pb(exported, reference, tmp_path):
    from xlnet_tf import files
    from xlnet_tf.serving import Client

    polled = _ram_root() + "/polled/cls"
    files.makedirs(polled)
    server = _serve(polled, enable_warmup=False)  # warmup is checked above: here only what is seen, and when
    client = Client(server.grpc_target, "cls", retries=0)
    try:
        print(f"\n[remote publish] {exported['path']} published into {polled} file by file while it is polled "
              f"(every 0.05 s, plus once after each file)")
        check("state before the copy", _seen(server, client, 1), "(None, None): nothing known",
              _seen(server, client, 1) == (None, None))
        source = _local_copy(exported["path"], tmp_path / "v1")
        order = files.walk_files(source)
        seen, landed = _publish_watched(server, client, source, f"{polled}/1", 1, last=(SAVED_MODEL,))
        names = list(dict.fromkeys(name for name, _ in seen))
        print(f"  published in this order: {names}")
        check("last file published", names[-1], f"== {SAVED_MODEL}", names[-1] == SAVED_MODEL
              and sorted(names) == order)
        before = [(name, what) for name, what in seen if name != SAVED_MODEL]
        early = [(name, what) for name, what in before if what != (None, None)]
        events = [e[3] for e in list(server.manager.events) if e[1] == "cls" and e[0] < landed[SAVED_MODEL]]
        print(f"  {len(before)} looks (manager state, GetModelStatus) while {len(names) - 1} of {len(names)} files "
              f"had landed; poller events before saved_model.pb landed: {events}")
        check("looks that saw version 1 (LOADING / AVAILABLE / error) before saved_model.pb landed", len(early),
              "== 0", not early)
        check("poller events of the model before saved_model.pb landed", events, "== []", events == [])
        waited = _available_after(server, 1, landed[SAVED_MODEL])
        check("seconds from saved_model.pb landing to version 1 AVAILABLE", f"{waited:.2f}" if waited is not None
              else None, "in [0, 30]", waited is not None and waited >= 0)
        failed = [e for e in server.manager.events if e[1] == "cls" and e[3] == "load_failed"]
        check("failed loads of version 1", len(failed), "== 0", not failed)
        _compare("gRPC Predict of the version published file by file", client.predict({"text": TEXTS}), reference)
        check("version that answered", client.last_version, "== 1", client.last_version == 1)
    finally:
        client.close()
        server.stop(1)
        files.rmtree(polled)


class _PausedGfile:
    """tf.io.gfile whose `copy` runs as TensorFlow's FileSystemCopyFile does (open the target, append 128 KiB
    chunks, close), in Python, calling `pause(step)` before the target is opened, once it is opened (empty), after
    each chunk and once it is closed; `rename` calls `pause` before and after it renames. Everything else is
    tf.io.gfile's (the server in this process reads through it too)."""

    CHUNK = 128 * 1024

    def __init__(self, pause):
        import tensorflow as tf

        self._gfile, self._pause = tf.io.gfile, pause

    def __getattr__(self, name):
        return getattr(self._gfile, name)

    def copy(self, source, target, overwrite=False):
        import tensorflow as tf

        if not overwrite and self._gfile.exists(target):
            raise tf.errors.AlreadyExistsError(None, None, f"{target} exists")
        self._pause(f"copy {target}: before open")
        with self._gfile.GFile(source, "rb") as reader, self._gfile.GFile(target, "wb") as writer:
            self._pause(f"copy {target}: opened")
            written = 0
            while chunk := reader.read(self.CHUNK):
                writer.write(chunk)
                writer.flush()
                written += len(chunk)
                self._pause(f"copy {target}: {written} bytes")
        self._pause(f"copy {target}: closed")

    def rename(self, source, target, overwrite=False):
        self._pause(f"rename {source} -> {target}: before")
        self._gfile.rename(source, target, overwrite)
        self._pause(f"rename {source} -> {target}: after")


def test_paused_publication_is_loaded_only_whole(exported, reference, tmp_path, monkeypatch):
    """The exporter's remote publication (`_publish_remote`) paused at every step of its copy, including inside
    and before the copy of saved_model.pb: at each pause the manager polls once (`poll_once`, what its poller
    thread runs every interval; no thread here, so nothing races) and what it shows of version 1 is looked at.
    Until every file is there at its name, whole, the version is neither loaded nor reported; the first poll
    after that loads it."""
    from xlnet_tf import files
    from xlnet_tf.export import exporter
    from xlnet_tf.serving import Client

    polled = _ram_root() + "/paused/cls"
    files.makedirs(polled)
    target = f"{polled}/1"
    server = _serve(polled, poll_interval=0, enable_warmup=False)
    client = Client(server.grpc_target, "cls", retries=0)
    source = _local_copy(exported["path"], tmp_path / "v1")
    wanted = {name: files.read_bytes(os.path.join(source, name)) for name in files.walk_files(source)}
    looks = []  # (step, files whole at their names, what the server shows after the poll)

    def whole():
        return sum(files.isfile(files.join(target, name)) and files.read_bytes(files.join(target, name)) == data
                   for name, data in wanted.items())

    def pause(step):
        server.manager.poll_once()
        step = re.sub(r"\.[0-9a-f]{32}\.tmp", ".<random>.tmp", step.replace(polled, "BASE"))
        looks.append((step, whole(), _seen(server, client, 1)))

    try:
        check("server's poller thread", server.manager._thread, "is None (polled only at the pauses)",
              server.manager._thread is None)
        monkeypatch.setattr(files, "_gfile", lambda: _PausedGfile(pause))
        exporter._publish_remote(source, target)
        monkeypatch.undo()
        print(f"\n[paused publication] {len(wanted)} files ({len(wanted[SAVED_MODEL])} bytes of {SAVED_MODEL}) "
              f"published into {target}; {len(looks)} pauses, one poll each:")
        for step, count, seen in looks:
            print(f"    {step}: {count}/{len(wanted)} files whole; manager, GetModelStatus: {seen}")
        partial = [(step, seen) for step, count, seen in looks if count < len(wanted)]
        inside = [step for step, _, _ in looks if SAVED_MODEL in step and step.endswith(" bytes")]
        chunks = -(-len(wanted[SAVED_MODEL]) // _PausedGfile.CHUNK)
        check(f"pauses inside the copy of {SAVED_MODEL}", len(inside),
              f"== {chunks} (one per 128 KiB chunk)", len(inside) == chunks)
        early = [(step, seen) for step, seen in partial if seen != (None, None)]
        check("polls that loaded or reported version 1 before all its files were whole", early[:3], "== []",
              not early)
        first = next((i for i, (_, count, _) in enumerate(looks) if count == len(wanted)), None)
        check("first pause with every file whole", looks[first][0] if first is not None else None,
              "the last of them (nothing is written after the version is complete)",
              first == len(looks) - 1)
        at_first = looks[first][2] if first is not None else None
        check("version 1 at the first poll after it is complete", at_first,
              "AVAILABLE in the manager and in GetModelStatus", at_first == (("AVAILABLE", None), ("AVAILABLE", "")))
        events = [e[3] for e in server.manager.events if e[1] == "cls" and e[2] == 1]
        check("version 1's events", events, "== ['available'] (no failed load)", events == ["available"])
        left = files.walk_files(target)
        check("files of the published version", left, "== the exported files (no temporary left)",
              left == sorted(wanted))
        _compare("gRPC Predict of the paused publication", client.predict({"text": TEXTS}), reference)
    finally:
        monkeypatch.undo()
        client.close()
        server.stop(1)
        files.rmtree(polled)


def test_negative_control_saved_model_pb_first_is_seen_early(exported, tmp_path):
    """The same copy with saved_model.pb FIRST: the poller sees (and tries) the version before its files are
    there, so the check above is able to fail. Polled once, right after saved_model.pb (no poller thread: one
    failed load, not one per poll)."""
    from xlnet_tf import files
    from xlnet_tf.serving import Client

    polled = _ram_root() + "/wrong-order/cls"
    files.makedirs(polled)
    server = _serve(polled, poll_interval=0, enable_warmup=False)
    client = Client(server.grpc_target, "cls", retries=0)
    try:
        source = _local_copy(exported["path"], tmp_path / "v1")
        others = tuple(n for n in files.walk_files(source) if n != SAVED_MODEL)
        seen, landed = _publish_watched(server, client, source, f"{polled}/1", 1, last=others, settle=0,
                                        poll_after={SAVED_MODEL})
        names = sorted(landed, key=landed.get)
        print(f"\n[negative control] published in this order: {names}")
        (_, (state, reported)), = seen
        print(f"  polled after {names[0]} landed (1 of {len(names)} files): manager state {state}; "
              f"GetModelStatus {reported}")
        events = [(e[3], e[4][:90]) for e in server.manager.events if e[1] == "cls" and e[2] == 1]
        print(f"  version 1 events: {events}")
        check("negative control: version 1 seen before its other files landed (manager state)", state,
              "not None (the check of the previous test can fail)", state is not None)
        check("negative control: GetModelStatus of version 1 before its other files landed", reported,
              "END with an error (the load was tried on half a version)",
              reported is not None and reported[0] == "END" and reported[1] != "")
        check("negative control: failed load attempts", sum(e[0] == "load_failed" for e in events), "== 1",
              [e[0] for e in events] == ["load_failed"])
    finally:
        client.close()
        server.stop(1)
        files.rmtree(polled)
