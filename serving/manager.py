"""Model versions on disk -> loaded servables, like TensorFlow Serving's file-system source and manager.

Each model has a base path holding version directories named by integers (`BASE/1`, `BASE/00002`); any
other name (e.g. an exporter's `.tmp-...` directory) is ignored. Base paths are local folders or URLs
(`gs://...`, `ram://...`), read through `xlnet_tf.files` (tf.io.gfile for URLs), as TensorFlow Serving reads
them through TensorFlow's Env. A poller (every `poll_interval` seconds) lists the base paths and applies each
model's version policy (latest N, all, specific):

* a new aspired version is loaded (state LOADING), its warmup requests
  (`assets.extra/tf_serving_warmup_requests`) are replayed, and only then is it AVAILABLE and routed to;
* a version no longer aspired (a newer version, its directory deleted) is retired only once an aspired
  version is AVAILABLE (availability preserving, TensorFlow Serving's default): it stops taking requests
  (UNLOADING) and its Session is closed (END) when the last request that holds it finishes, however long
  that takes, as TensorFlow Serving does: a version swap never fails a request, and nothing waits for that
  last request (the poller goes on loading and retiring other versions meanwhile);
* only at shutdown (`stop`) is a version closed under running requests, after `drain_timeout` seconds: the
  log says how many were cut off;
* a version directory is ignored until it holds its `saved_model.pb` (or `saved_model.pbtxt`), non-empty:
  the file the exporter publishes last, whole (`files.publish_tree`: renamed into place where a store shows a
  file while it is written), so on a bucket (gs://, where a directory "rename" is a copy object by object) a
  version still being copied is neither loaded nor reported (GetModelStatus: not found) -- TensorFlow Serving
  lists it at once and its load fails and is retried, see serving/README.md. A directory seen complete is not
  checked again while it stays listed (each check is a request on an object store);
* a load that fails (e.g. a directory copied with `saved_model.pb` before its variables) is retried on later
  polls, at most `max_load_retries` times for unchanged files; the directory's files (names, sizes, mtimes)
  are compared before and after the load, and a load of files that changed meanwhile is thrown away and
  retried;
* a base path with no version directory leaves the loaded versions serving;
* `reload(entries)` (gRPC `ModelService.HandleReloadConfigRequest`) replaces the served models: a new model
  (or one whose base path changed) is loaded before requests are routed to it, a kept model takes its new
  version policy and labels (loading and retiring versions as a poll does), and a removed model stops taking
  requests (NOT_FOUND) and its versions are retired as above; models kept in both configs serve throughout.

Requests pick the highest AVAILABLE version, a specific one, or one named by a version label.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
import time

from xlnet_tf import files

from . import errors
from .servable import Servable

log = logging.getLogger("xlnet_tf.serving")

# A version directory's name: a number that fits int64, as TensorFlow Serving parses it (ASCII digits, leading zeros
# allowed: BASE/00002; a name of thousands of digits, or of other scripts' digits, is not a version: ignored).
_VERSION_DIR = re.compile(r"^[0-9]{1,64}$")

START, LOADING, AVAILABLE, UNLOADING, END = "START", "LOADING", "AVAILABLE", "UNLOADING", "END"


SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")  # what TensorFlow's loader reads (either)


def is_complete(version_dir):
    """Whether a version directory holds its SavedModel file (`saved_model.pb` or `.pbtxt`, non-empty), the
    file an export publishes last: TensorFlow's `MaybeSavedModelDirectory` test, plus the size (a file that
    another tool is still writing in place on a store that shows it meanwhile, HDFS or `ram://`, can be empty;
    if it is not, its load fails and is retried once the files change)."""
    for name in SAVED_MODEL_FILES:
        info = files.stat(files.join(version_dir, name))
        if info is not None and not info.is_dir and info.length > 0:
            return True
    return False


def _numeric_children(base_path):
    """[(name, path)] of the integer-named directories under base_path ([] if it is missing)."""
    base_path = os.fspath(base_path)
    if not files.is_remote(base_path):
        try:
            entries = list(os.scandir(base_path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [(e.name, e.path) for e in entries if _is_version(e.name) and e.is_dir()]
    import tensorflow as tf

    try:
        names = files.listdir(base_path)  # object stores: "1/" for a prefix, stripped
    except tf.errors.NotFoundError:
        return []
    # Not a directory test per name (one request each): a name that is a file has no saved_model.pb inside.
    return [(name, files.join(base_path, name)) for name in names if _is_version(name)]


def _is_version(name):
    return _VERSION_DIR.fullmatch(name) is not None and int(name) < 1 << 63


def list_versions(base_path, known=None):
    """{version: directory} of the integer-named directories under base_path that hold their SavedModel file
    (`is_complete`); {} if base_path is missing. `known`: a set of directories already found complete, not
    checked again; it is updated (and forgets those no longer listed)."""
    found = {}
    listed = _numeric_children(base_path)
    for name, path in listed:
        if int(name) in found:
            continue
        if known is not None and path in known:
            found[int(name)] = path
        elif is_complete(path):
            found[int(name)] = path
            if known is not None:
                known.add(path)
    if known is not None:
        known.intersection_update(path for _, path in listed)
    return found


def _fingerprint(path):
    """The files of a version directory with their sizes and mtimes (a tuple; compared before and after a
    load)."""
    path = os.fspath(path)
    items = []
    if files.is_remote(path):
        for name in files.walk_files(path):
            info = files.stat(files.join(path, name))
            if info is not None:
                items.append((name, info.length, info.mtime_ns))
        return tuple(sorted(items))
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            try:
                stat = os.stat(full)
            except OSError:
                continue
            items.append((os.path.relpath(full, path), stat.st_size, stat.st_mtime_ns))
    return tuple(sorted(items))


class VersionState:
    """A version's lifecycle state, its servable while loaded, and the requests running on it."""

    def __init__(self, model, version, path):
        self.model = model
        self.version = version
        self.path = path
        self.state = START
        self.error = None  # ServingError of a failed load
        self.servable = None
        self.inflight = 0
        self.failures = 0
        self.failed_fingerprint = None
        self.failed_at = None
        self.available_at = None
        self.closing = False  # retired and its Session being closed (by the poller or its last request)


class Handle:
    """A servable held for one request: released (and the version's drain counter updated) on exit."""

    def __init__(self, model, state):
        self._model = model
        self.state = state
        self.servable = state.servable
        self.version = state.version

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._model.release(self.state)


class ServedModel:
    """One configured model: its versions and their states."""

    def __init__(self, entry, manager):
        self.entry = entry
        self.name = entry.name
        self.labels = dict(entry.labels)
        self.manager = manager
        self.versions = {}  # version -> VersionState
        self.complete = set()  # version directories found holding their saved_model.pb (list_versions)
        self._cond = threading.Condition()

    # -- routing --------------------------------------------------------------------------------------

    def acquire(self, version=None, label=None) -> Handle:
        """The version a request names (the latest available one by default), held until the handle exits;
        TensorFlow Serving's errors: INVALID_ARGUMENT for an unknown label, NOT_FOUND "Servable not found for
        request: Latest(NAME)" / "Specific(NAME, VERSION)" when no such version is available."""
        with self._cond:
            if label:
                if label not in self.labels:
                    raise errors.invalid_argument(f"Unrecognized servable version label: {label}")
                version = self.labels[label]
            if version is None:
                available = [s for s in self.versions.values() if s.state == AVAILABLE]
                if not available:
                    raise errors.not_found(f"Servable not found for request: Latest({self.name})")
                state = max(available, key=lambda s: s.version)
            else:
                state = self.versions.get(int(version))
                if state is None or state.state != AVAILABLE:
                    raise errors.not_found(f"Servable not found for request: Specific({self.name}, {version})")
            state.inflight += 1
            return Handle(self, state)

    def release(self, state):
        """Ends a request's hold on its version; the last request of a retired version closes it."""
        with self._cond:
            state.inflight -= 1
            if state.inflight:
                return
            self._cond.notify_all()
            retired = state.state == UNLOADING and not state.closing
            if retired:
                state.closing = True
        if retired:  # closed off the request's thread: its response is not delayed
            threading.Thread(target=self._close, args=(state,), name=f"unload-{self.name}-{state.version}",
                             daemon=True).start()

    def status(self, version=None, label=None):
        """[(version, state, error or None)] like GetModelStatus (NOT_FOUND when nothing is known)."""
        with self._cond:
            if label:
                if label not in self.labels:
                    raise errors.invalid_argument(f"Unrecognized servable version label: {label}")
                version = self.labels[label]
            if version is not None:
                state = self.versions.get(int(version))
                if state is None:
                    raise errors.not_found(f"Could not find version {version} of model {self.name}")
                return [(state.version, state.state, state.error)]
            if not self.versions:
                raise errors.not_found(f"Could not find any versions of model {self.name}")
            return [(s.version, s.state, s.error) for _, s in sorted(self.versions.items())]

    # -- lifecycle ------------------------------------------------------------------------------------

    def _waiting(self):
        """One line on a base path with nothing to load: what is missing and how the server goes on."""
        base, every = self.entry.base_path, self.manager.poll_interval
        missing = f"base path {base} does not exist" if not files.isdir(base) else \
            f"no integer version directory holding a saved_model.pb under {base}"
        looking = f"looking for it every {every:g}s, as TensorFlow Serving does" if every and every > 0 else \
            "looked at only at start (poll interval 0)"
        return f"{missing} (yet); {looking}; its requests fail with NOT_FOUND until a version loads"

    def reconcile(self):
        """One poll: load new aspired versions (with warmup), then unload those no longer aspired."""
        if self.entry.saved_model_at_base and is_complete(self.entry.base_path):
            on_disk = {1: self.entry.base_path}
        else:
            on_disk = list_versions(self.entry.base_path, self.complete)
        if not on_disk:
            if not self.versions:
                self.manager.note_once(self.name, self._waiting())
            return
        aspired = self.entry.aspired(on_disk)
        for version in sorted(aspired, reverse=True):  # newest first: it is what 'latest' serves
            if self.manager.stopping:
                return
            with self._cond:
                state = self.versions.get(version)
                if state is None:
                    state = self.versions[version] = VersionState(self.name, version, on_disk[version])
                elif state.state == AVAILABLE or state.state == LOADING:
                    continue
                elif state.state in (UNLOADING,):
                    continue
                elif state.state == END and state.error is None:
                    state = self.versions[version] = VersionState(self.name, version, on_disk[version])
            if state.error is not None and _fingerprint(state.path) == state.failed_fingerprint:
                if state.failures > self.manager.max_load_retries or \
                        time.monotonic() - state.failed_at < self.manager.options.load_retry_interval:
                    continue  # unchanged files: at most max_load_retries retries, load_retry_interval apart
            self._load(state)
        with self._cond:
            if not any(s.state == AVAILABLE and s.version in aspired for s in self.versions.values()):
                return  # availability preserving: keep what serves until an aspired version does
            retired = [s for s in self.versions.values() if s.version not in aspired and s.state == AVAILABLE]
        self._retire(retired)

    def _retire(self, states, why=""):
        """Stops AVAILABLE versions taking requests; closes the idle ones now, the others when their last
        request ends (`release`)."""
        idle = []
        with self._cond:
            for state in states:
                state.state = UNLOADING
                self.manager.record(self.name, state.version, "unloading", f"{state.inflight} requests running{why}")
                if state.inflight == 0:
                    state.closing = True
                    idle.append(state)
        for state in idle:
            self._close(state)

    def _load(self, state):
        with self._cond:
            state.state = LOADING
        manager = self.manager
        started = time.monotonic()
        before = _fingerprint(state.path)
        servable = Servable(self.name, state.version, state.path, manager.session_config, manager.validate_utf8,
                            manager.options.saved_model_tags)
        try:
            servable.load()
            warmed = servable.warmup(manager.warmup_iterations) if manager.enable_warmup else 0
            if _fingerprint(state.path) != before:
                raise errors.ServingError("UNAVAILABLE", "the version directory changed while loading")
        except Exception as error:  # noqa: BLE001 - a bad version must not stop the server
            servable.close()
            serving_error = error if isinstance(error, errors.ServingError) else \
                errors.ServingError.from_tf_error(error) if hasattr(error, "error_code") else \
                errors.ServingError("UNKNOWN", f"{type(error).__name__}: {error}")
            with self._cond:
                state.state = END
                state.error = serving_error
                state.failures += 1
                state.failed_at = time.monotonic()
                state.failed_fingerprint = _fingerprint(state.path)
            manager.record(self.name, state.version, "load_failed", serving_error.message)
            if manager.metrics is not None:
                manager.metrics.load(state.path, False, time.monotonic() - started)
            log.warning("model %s version %d failed to load (attempt %d): %s", self.name, state.version,
                        state.failures, serving_error.message)
            return
        with self._cond:
            state.servable = servable
            state.error = None
            state.state = AVAILABLE
            state.available_at = time.monotonic()
        manager.record(self.name, state.version, "available", f"warmup requests: {warmed}")
        if manager.metrics is not None:
            manager.metrics.load(state.path, True, time.monotonic() - started)
        log.info("model %s version %d loaded in %.2fs (%d warmup requests) from %s", self.name,
                 state.version, time.monotonic() - started, warmed, state.path)

    def _close(self, state, cut_off=0):
        """Closes a retired version's Session (UNLOADING -> END)."""
        with self._cond:
            servable, state.servable = state.servable, None
            state.state = END
        if servable is not None:
            servable.close()
        self.manager.record(self.name, state.version, "unloaded", f"{cut_off} requests cut off")
        log.info("model %s version %d unloaded", self.name, state.version)

    def check_labels(self, entry):
        """FAILED_PRECONDITION, as TensorFlow Serving's UpdateModelVersionLabelMap answers, when one of `entry`'s
        version labels names a version that is not AVAILABLE; with allow_version_labels_for_unavailable_models,
        only a label that already points elsewhere must name an AVAILABLE version."""
        allow = self.manager.options.allow_version_labels_for_unavailable_models
        with self._cond:
            for label, version in entry.labels:
                if allow and self.labels.get(label, version) == version:
                    continue
                state = self.versions.get(version)
                if state is None or state.state != AVAILABLE:
                    raise errors.failed_precondition(
                        f"Request to assign label to version {version} of model {self.name}, which is not "
                        "currently available for inference")

    def update(self, entry):
        """Takes a reloaded config's entry of this model (same base path): its version policy and labels."""
        with self._cond:
            self.entry = entry
            self.labels = dict(entry.labels)

    def retire_all(self):
        """A model removed from the config: its versions are retired (closed when their last request ends)."""
        with self._cond:
            loaded = [s for s in self.versions.values() if s.state == AVAILABLE]
        self._retire(loaded, " (model removed from the config)")

    def unload_all(self):
        """Shutdown: every loaded version stops taking requests, gets `drain_timeout` seconds for the ones
        running, then is closed under the rest (logged)."""
        with self._cond:
            states = [s for s in self.versions.values() if s.state in (AVAILABLE, UNLOADING) and not s.closing]
            for state in states:
                state.state, state.closing = UNLOADING, True
            deadline = time.monotonic() + self.manager.drain_timeout
            while any(s.inflight for s in states) and time.monotonic() < deadline:
                self._cond.wait(max(0.01, deadline - time.monotonic()))
            left = {state.version: state.inflight for state in states}
        for state in states:
            if left[state.version]:
                log.warning("model %s version %d: %d requests still running at shutdown after %.0fs; closing "
                            "it under them", self.name, state.version, left[state.version], self.manager.drain_timeout)
            self._close(state, left[state.version])


class ModelManager:
    """All configured models, a poller thread that follows their base paths, and an event log."""

    def __init__(self, entries, options, metrics=None):
        self.models = collections.OrderedDict((e.name, ServedModel(e, self)) for e in entries)
        self.options = options  # a ServerOptions
        self.poll_interval = options.poll_interval
        self.enable_warmup = options.enable_warmup
        self.warmup_iterations = options.warmup_iterations
        self.max_load_retries = options.max_load_retries
        self.drain_timeout = options.drain_timeout
        self.session_config = options.session_config
        self.validate_utf8 = options.validate_utf8
        self.metrics = metrics  # monitoring.Metrics: load attempts and latency
        self.stopping = False
        self.events = collections.deque(maxlen=1000)  # (monotonic time, model, version, event, detail)
        self._events_lock = threading.Lock()
        self._noted = set()
        self._wake = threading.Event()
        self._thread = None
        self._poll_lock = threading.Lock()

    def inflight(self):
        """Requests running now, on every version of every model."""
        return sum(state.inflight for model in self.models.values() for state in list(model.versions.values()))

    def model(self, name) -> ServedModel:
        try:
            return self.models[name]
        except KeyError:
            raise errors.not_found(f"Servable not found for request: model {name!r} is not served here "
                                   f"(models: {', '.join(self.models)})") from None

    def acquire(self, name, version=None, label=None) -> Handle:
        if not name:
            raise errors.invalid_argument("ModelSpec has no name specified.")
        model = self.models.get(name)
        if model is None:  # TensorFlow Serving resolves a label first, then looks the servable up
            if label:
                raise errors.invalid_argument(f"Unrecognized servable version label: {label}")
            spec = f"Specific({name}, {version})" if version is not None else f"Latest({name})"
            raise errors.not_found(f"Servable not found for request: {spec}")
        return model.acquire(version, label)

    def record(self, model, version, event, detail):
        with self._events_lock:
            self.events.append((time.monotonic(), model, version, event, detail))

    def note_once(self, key, message):
        if key not in self._noted:
            self._noted.add(key)
            log.warning("model %s: %s", key, message)

    def reload(self, entries):
        """Serves the models of `entries` (ModelEntry list) from now on; returns when the new models' versions
        on disk have loaded (or failed). See the module docstring."""
        with self._poll_lock:
            old = self.models
            fresh = {}
            for entry in entries:
                current = old.get(entry.name)
                if current is None or current.entry.base_path != entry.base_path:
                    fresh[entry.name] = ServedModel(entry, self)
                    fresh[entry.name].reconcile()  # loaded before any request is routed to it
            models = collections.OrderedDict((e.name, fresh.get(e.name) or old[e.name]) for e in entries)
            try:
                for entry in entries:
                    models[entry.name].check_labels(entry)
            except errors.ServingError:
                for model in fresh.values():  # the config is refused: what it loaded goes
                    model.unload_all()
                raise
            for entry in entries:
                if entry.name not in fresh:
                    models[entry.name].update(entry)
            self.models = models  # routing switches here, in one assignment
            for name, model in models.items():
                if name not in fresh:
                    model.reconcile()  # policy and labels of a kept model
            for name, model in old.items():
                if models.get(name) is not model:
                    model.retire_all()
            self.record("*", 0, "config reloaded", ", ".join(models))

    def poll_once(self):
        with self._poll_lock:
            for model in self.models.values():
                if self.stopping:
                    return
                try:
                    model.reconcile()
                except Exception:  # noqa: BLE001 - keep polling the other models
                    log.exception("model %s: poll failed", model.name)

    def start(self):
        """Loads what is on disk now (blocking, like tensorflow_model_server), then polls in a thread. A version
        label of the configuration whose version did not load is a UserError (see `check_labels`; TensorFlow
        Serving checks before loading, so there a first config with labels needs
        --allow_version_labels_for_unavailable_models)."""
        self.poll_once()
        for model in self.models.values():
            try:
                model.check_labels(model.entry)
            except errors.ServingError as error:
                from xlnet_tf.errors import UserError

                self.stop()
                raise UserError(f"model config: {error.message} (--allow_version_labels_for_unavailable_models "
                                "lets a label wait for its version)") from None
        if self.poll_interval and self.poll_interval > 0:
            self._thread = threading.Thread(target=self._poll_loop, name="version-poller", daemon=True)
            self._thread.start()

    def _poll_loop(self):
        while not self.stopping:
            self._wake.wait(self.poll_interval)
            if self.stopping:
                return
            self.poll_once()

    def stop(self):
        self.stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        with self._poll_lock:
            for model in self.models.values():
                model.unload_all()
