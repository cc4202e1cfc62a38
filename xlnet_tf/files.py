"""The one file layer: every read and write of a model directory, pretraining data, an export base, a prediction
output, a plot or a log goes through here, so that "does this work on gs://" has one answer.

Paths are local paths or URLs of any filesystem TensorFlow has (`gs://`, `s3://` with its plugin, `hdfs://`,
and `ram://`, TensorFlow's in-memory filesystem, which the tests use in place of a bucket). Local paths use
Python's own `os` / `open` (fast, and atomic renames); URLs go through `tf.io.gfile`.

Publishing, so that no reader sees half of a file or of a directory:
- `write_bytes` / `write_text` / `write_json` / `copy`: the file is written under a temporary name in the same
  folder (`.NAME.<random>.tmp`) and renamed to its name, one step locally (POSIX) and on the filesystems that
  show a file while it is written (`ram://`, HDFS). On gs:// and s3:// an object becomes visible only once its
  upload is complete, and a rename there is a copy that buys nothing, so files are written in place.
- `publish_tree`: a finished local directory copied into a remote target directory file by file, each as by
  `copy` (whole), the files named in `last` after every other (an export's `saved_model.pb`: a version without
  it is not loadable, so a poller that lists the version early never reads half of it). Local targets are
  renamed into place by their callers instead (one atomic step).
- `LineLog`: an append-only JSON-lines log (train_log.jsonl). Local: appended and flushed line by line. Object
  stores have no append (TensorFlow's GCS "append" re-uploads the whole object on every flush), so remote lines
  are kept in memory and the object is rewritten only at `flush()` (the trainer flushes at every checkpoint and
  at the end): one upload per checkpoint, never one per host call.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import shutil
import tempfile
import uuid

from xlnet_tf.errors import UserError

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def is_remote(path) -> bool:
    """Whether `path` is a URL (gs://, ram://, ...) rather than a local path."""
    return bool(_SCHEME.match(os.fspath(path)))


def absolute(path) -> str:
    """A local path made absolute; a URL as it is (`os.path.abspath` would turn gs://b/x into <cwd>/gs:/b/x)."""
    path = os.fspath(path)
    return path if is_remote(path) else os.path.abspath(path)


def join(*parts) -> str:
    return os.path.join(*(os.fspath(p) for p in parts))


def dirname(path) -> str:
    path = os.fspath(path).rstrip("/") if is_remote(path) else os.fspath(path)
    return os.path.dirname(path)


def basename(path) -> str:
    return os.path.basename(os.fspath(path).rstrip("/"))


def resolve(path, folder):
    """A path recorded relative to `folder` (or absolute, or a URL): joined to `folder` when relative, else as
    it is."""
    path = os.fspath(path)
    return path if is_remote(path) or os.path.isabs(path) else join(folder, path)


# -- queries ----------------------------------------------------------------------------------------------------


def _ram_prefix_only(path):
    """TensorFlow's `ram://` filesystem (the tests' stand-in for a bucket) answers exists / isdir for any prefix
    of a stored name ("ram://b/1" when only "ram://b/10/..." exists); its glob is exact."""
    return path.startswith("ram://") and not any(c in path for c in "*?[") and not _gfile().glob(path)


def exists(path) -> bool:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.exists(path)
    return _gfile().exists(path) and not _ram_prefix_only(path)


def isdir(path) -> bool:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.isdir(path)
    return _gfile().isdir(path) and not _ram_prefix_only(path)


def require(path, name, pattern=False, also=()):
    """Raises UserError naming `name` (a flag, an argument or a `Spelling`) and `path` when nothing exists there
    (nor at any path of `also`); with `pattern`, a path holding * ? [ is a glob that must match something. A
    filesystem that cannot be asked (no credentials, no network) is left for the command to report."""
    path = os.fspath(path)
    try:
        if pattern and any(c in path for c in "*?["):
            if not glob(path):
                raise UserError(name, f": no file matches {path}")
        elif not exists(path) and not any(exists(other) for other in also):
            raise UserError(name, f": {path} does not exist")
    except UserError:
        raise
    except Exception:  # noqa: BLE001 (tf.errors.* of a filesystem that cannot answer: the command says more)
        return


def checkpoint_reader(path):
    """A reader of TF checkpoint `path` (a prefix, or a folder: its latest checkpoint), as
    `tf.train.load_checkpoint` with this module's `isdir` (ram:// answers TensorFlow's wrongly for a prefix)."""
    import tensorflow as tf

    path = os.fspath(path)
    if isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest is None:
            raise ValueError(f"{path}: a folder without a checkpoint")
        path = latest
    return tf.compat.v1.train.NewCheckpointReader(path)


def isfile(path) -> bool:
    return exists(path) and not isdir(path)


def listdir(path) -> list:
    """The names in folder `path`, sorted, without the trailing "/" object stores give sub-folders."""
    path = os.fspath(path)
    names = _gfile().listdir(path) if is_remote(path) else os.listdir(path)
    return sorted({name.rstrip("/") for name in names})


def glob(pattern) -> list:
    pattern = os.fspath(pattern)
    if is_remote(pattern):
        return sorted(_gfile().glob(pattern))
    import glob as _glob

    return sorted(_glob.glob(pattern))


def size(path) -> int:
    path = os.fspath(path)
    return _gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def walk(folder):
    """`os.walk(folder)` (top-down; `dirs` may be sorted in place to order the walk) on any filesystem."""
    folder = os.fspath(folder)
    return _gfile().walk(folder) if is_remote(folder) else os.walk(folder)


Stat = collections.namedtuple("Stat", "is_dir length mtime_ns")  # what `stat` returns


def stat(path):
    """`Stat(is_dir, length, mtime_ns)` of `path` in one request, or None when nothing is there.

    On object stores a folder is a prefix (is_dir, length 0); `ram://` gives every mtime as 0 and calls a path
    a folder when another path merely starts with it (so check `is_dir` before trusting a length)."""
    path = os.fspath(path)
    if not is_remote(path):
        try:
            info = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        import stat as _stat

        return Stat(_stat.S_ISDIR(info.st_mode), int(info.st_size), int(info.st_mtime_ns))
    import tensorflow as tf

    try:
        info = tf.io.gfile.stat(path)
    except tf.errors.NotFoundError:
        return None
    return Stat(bool(info.is_directory), int(info.length), int(info.mtime_nsec))


def walk_files(folder) -> list:
    """Every file under `folder` as a path relative to it ('/'-separated), sorted."""
    folder = os.fspath(folder).rstrip("/") or "/"
    found = []
    for root, _, names in walk(folder):
        rel = root.rstrip("/")[len(folder):].strip("/").replace(os.sep, "/")
        found.extend(f"{rel}/{name}" if rel else name for name in names)
    return sorted(found)


# -- reading ----------------------------------------------------------------------------------------------------


def open(path, mode="rb", encoding=None):  # noqa: A001 (the file layer's own open)
    """A file object: Python's for local paths, `tf.io.gfile.GFile` for URLs (text modes decode as UTF-8)."""
    path = os.fspath(path)
    if not is_remote(path):
        import builtins

        return builtins.open(path, mode, encoding=encoding if "b" not in mode else None)
    return _gfile().GFile(path, mode)


def read_bytes(path) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_text(path) -> str:
    return read_bytes(path).decode("utf-8")


def read_json(path, what="JSON"):
    """The JSON value in `path`; UserError naming the file (and line) when it is missing or not valid JSON."""
    path = os.fspath(path)
    if not exists(path):
        raise UserError(f"{path}: not found")
    try:
        return json.loads(read_bytes(path).decode("utf-8"))
    except UnicodeDecodeError as error:
        raise UserError(f"{path}: not UTF-8 ({error})") from None
    except json.JSONDecodeError as error:
        raise UserError(f"{path}:{error.lineno}: not valid {what} ({error.msg})") from None


# -- writing ----------------------------------------------------------------------------------------------------


def makedirs(path):
    path = os.fspath(path)
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def makedirs_for(path):
    """Creates the folder that file `path` goes into."""
    parent = dirname(path)
    if parent:
        makedirs(parent)


_WHOLE_WHEN_CLOSED = ("gs://", "s3://")  # object stores: an object appears once its upload is complete


def write_whole(path, write, overwrite=True, layer=None):
    """Has `write(name)` write the whole of file `path` (its folder exists) where no reader sees it half written:
    under a temporary name beside it (`.NAME.<random>.tmp`), renamed over `path`; in place on an object store
    (module docstring). `layer`: an object with `exists`, `remove` and `rename(source, target)` to do it with (the
    pretraining writers' files objects: TensorFlowFiles, the Beam pipelines' BeamFiles); default this module's
    (`overwrite` False: the rename fails when `path` exists)."""
    if path.startswith(_WHOLE_WHEN_CLOSED):
        write(path)
        return
    folder, name = os.path.split(path)
    temporary = join(folder, f".{name}.{uuid.uuid4().hex}.tmp")  # on ram://, NAME.* would make NAME a "folder"
    try:
        write(temporary)
        if layer is None:
            rename(temporary, path, overwrite=overwrite)
        else:
            layer.rename(temporary, path)
    except BaseException:
        found, drop = (exists, remove) if layer is None else (layer.exists, layer.remove)
        with contextlib.suppress(Exception):  # the original error is the one to report
            if found(temporary):
                drop(temporary)
        raise


def write_bytes(path, data: bytes):
    """`data` as the whole of file `path`, published in one step (see the module docstring); its folder is
    created."""
    path = os.fspath(path)
    makedirs_for(path)

    def write(name):
        with open(name, "wb") as f:
            f.write(data)

    write_whole(path, write)


def write_text(path, text: str):
    write_bytes(path, text.encode("utf-8"))


def json_text(value, indent=2, sort_keys=True):
    """`value` as the project's JSON files hold it: indented, keys sorted, a final newline."""
    return json.dumps(value, indent=indent, sort_keys=sort_keys) + "\n"


def write_json(path, value, indent=2, sort_keys=True):
    write_text(path, json_text(value, indent, sort_keys))


def copy(source, target, overwrite=True):
    """Copies file `source` to `target` (any filesystems, streamed), its folder created; published whole as by
    `write_bytes`."""
    source, target = os.fspath(source), os.fspath(target)
    if not overwrite and exists(target):
        raise UserError(f"{target} already exists")
    makedirs_for(target)
    if is_remote(source) or is_remote(target):
        write_whole(target, lambda name: _gfile().copy(source, name, overwrite=True), overwrite)
    else:
        write_whole(target, lambda name: shutil.copyfile(source, name), overwrite)


def remove(path):
    path = os.fspath(path)
    if is_remote(path):
        _gfile().remove(path)
    else:
        os.remove(path)


def rmtree(path):
    """Removes folder `path` and everything in it (nothing when it is missing)."""
    path = os.fspath(path)
    if is_remote(path):
        if _gfile().exists(path):
            _gfile().rmtree(path)
    else:
        shutil.rmtree(path, ignore_errors=True)


def rename(source, target, overwrite=True):
    source, target = os.fspath(source), os.fspath(target)
    if is_remote(source) or is_remote(target):
        _gfile().rename(source, target, overwrite=overwrite)
    elif overwrite:
        os.replace(source, target)
    else:
        os.rename(source, target)


def publish_tree(source_dir, target_dir, last=(), on_file=None):
    """Publishes finished local folder `source_dir` as remote `target_dir` (gs://...; it must not exist), which
    has no directory rename (a local target is renamed into place by its caller, in one atomic step).

    The files are copied one by one, each whole (`copy`), those named in `last` (paths relative to source_dir)
    after every other, so that a reader who finds them finds everything. `on_file(relative_path)` is called
    after each file (tests interrupt the copy with it). `source_dir` is removed afterwards."""
    source_dir, target_dir = os.fspath(source_dir), os.fspath(target_dir)
    if not is_remote(target_dir):
        raise ValueError(f"publish_tree publishes to a remote store; {target_dir} is local (rename it into place)")
    if exists(target_dir):
        raise UserError(f"{target_dir} already exists: a published folder is never overwritten")
    names = walk_files(source_dir)
    order = [n for n in names if n not in last] + [n for n in last if n in names]
    makedirs(target_dir)
    for name in order:
        copy(os.path.join(source_dir, name), join(target_dir, name), overwrite=False)
        if on_file is not None:
            on_file(name)
    shutil.rmtree(source_dir, ignore_errors=True)


class LineLog:
    """An append-only log of JSON lines at `path` (any filesystem), continued when it exists (a resumed run).

    Local files are appended and flushed line by line. On remote stores lines are kept in memory and the object
    is rewritten at `flush()` (see the module docstring)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        self.remote = is_remote(self.path)
        makedirs_for(self.path)
        if self.remote:
            self._lines = read_text(self.path).splitlines(keepends=True) if exists(self.path) else []
            self._dirty = False
            self._handle = None
        else:
            import builtins

            self._handle = builtins.open(self.path, "a", encoding="utf-8")

    def write(self, record: dict):
        line = json.dumps(record) + "\n"
        if self.remote:
            self._lines.append(line)
            self._dirty = True
        else:
            self._handle.write(line)
            self._handle.flush()

    def flush(self):
        if self.remote and self._dirty:
            write_text(self.path, "".join(self._lines))
            self._dirty = False

    def close(self):
        self.flush()
        if self._handle is not None:
            self._handle.close()
            self._handle = None


class AtomicWrites:
    """Whole files written under a temporary name and renamed into place, through the `open`, `exists`, `remove`
    and `rename` of the files object it is part of (TensorFlowFiles; the Beam pipelines' BeamFiles)."""

    def write_atomically(self, path, write):
        """`write(temporary_path)`, then the temporary file renamed to `path` (`write_whole`); on failure it is
        removed."""
        write_whole(path, write, layer=self)

    def write_json(self, path, value):
        """`value` as JSON (`json_text`) at `path`, written atomically."""
        def write(temporary):
            with self.open(temporary, "wb") as f:
                f.write(json_text(value).encode("utf-8"))

        self.write_atomically(path, write)


class TensorFlowFiles(AtomicWrites):
    """This module's functions behind the small interface the pretraining-data steps use (the Beam pipelines'
    `BeamFiles` has the same shape over Beam's filesystems)."""

    join = staticmethod(join)
    glob = staticmethod(glob)
    exists = staticmethod(exists)
    size = staticmethod(size)
    makedirs = staticmethod(makedirs)
    remove = staticmethod(remove)
    remove_tree = staticmethod(rmtree)

    @staticmethod
    def open(path, mode="rb"):
        return open(path, mode)

    @staticmethod
    def open_random(path):
        """`path` for many small reads at random offsets (the token chunks)."""
        return open(path, "rb")

    @staticmethod
    def rename(source, target):
        rename(source, target, overwrite=True)

    @staticmethod
    def write_records(path, records):
        """Writes serialized records as one TFRecord file."""
        import tensorflow as tf

        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)


def local_log_path(work_dir, name):
    """Where a command's log file goes: inside `work_dir` when it is local; when it is remote, a local file under
    the system's temporary folder named after it (logging appends line by line, which object stores cannot)."""
    work_dir = os.fspath(work_dir)
    if not is_remote(work_dir):
        return os.path.join(work_dir, name)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", work_dir)
    return os.path.join(tempfile.gettempdir(), "xlnet-tf-logs", safe, name)
