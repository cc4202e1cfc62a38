"""What a command shows: the project's own lines (section headers, progress, summaries, warnings) on the
console; other libraries' chatter (absl's "Sharding callback duration", SavedModel's input-renaming notices,
TensorFlow's INFO lines, SentencePiece's trainer log) in a log file in the command's work or model directory.
What native code writes to the process's stderr (TensorFlow's and absl's C++ start-up and run-time lines,
`QuietNativeOutput`) goes to that file too. `--verbose` shows everything on the console as well.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile

LOG_FILE = "xlnet-tf.log"
OWN_LOGGERS = ("xlnet_tf", "__main__")
_installed = []  # the handlers `configure` added, removed by its next call
# `log.info(..., extra=FILE_ONLY)`: a record for the log file, kept off the console (a line the command also prints)
FILE_ONLY = {"console": False}


def not_file_only(record):
    """A console handler's filter: False for the records logged with `FILE_ONLY`."""
    return getattr(record, "console", True)


def _own_or_warning(record):
    return record.name.split(".")[0] in OWN_LOGGERS or record.levelno >= logging.WARNING


class _ConsoleHandler(logging.StreamHandler):
    """A StreamHandler on whatever `sys.stderr` is when a record is emitted, not when the handler was made: a
    program (or a notebook, or a test's capture) that replaces sys.stderr later still gets the lines, and a
    replaced stream that was closed is never written to."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        """StreamHandler's constructor sets it; the stream is always the current sys.stderr."""


def configure(log_file=None, verbose=False):
    """Logging for one command: INFO and above to the console and, with `log_file`, to that file (appended,
    its folder created). With a log file and without `verbose`, the console shows only the project's own
    records and other libraries' warnings and errors; the file holds every record."""
    root = logging.getLogger()
    for handler in _installed:
        root.removeHandler(handler)
        handler.close()
    _installed.clear()
    console = _ConsoleHandler()
    console.addFilter(not_file_only)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handlers = [console]
    if log_file:
        if not verbose:
            console.addFilter(_own_or_warning)
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        file = logging.FileHandler(log_file, encoding="utf-8")
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handlers.append(file)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(logging.INFO)
    _installed.extend(handlers)


@contextlib.contextmanager
def native_output_to(log_file):
    """While the block runs, what C/C++ code writes to the process's stderr (file descriptor 2: SentencePiece's
    trainer) is appended to `log_file` instead; a no-op when `log_file` is None."""
    if log_file is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(log_file, "ab") as target:
            os.dup2(target.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _writes_to_fd2(stream):
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError and a ValueError
        return False


class QuietNativeOutput:
    """Keeps what native code writes to file descriptor 2 (TensorFlow's and absl's C++ log lines, "To enable the
    following instructions", SentencePiece's trainer) off the console for one command: first in a scratch file,
    then, from `into(log_file)` on, appended to the command's log file (the scratch file's lines first).

    Python's own writes stay on the console: when `sys.stderr` writes to file descriptor 2 it is replaced by a
    stream on a copy of the console's descriptor (tracebacks, logging's console handler and progress bars use
    sys.stderr); a sys.stderr that does not (a test's capture, a notebook) is left as it is. `close()` puts
    both back."""

    def __init__(self):
        sys.stderr.flush()
        self.console = os.dup(2)
        self._scratch = tempfile.TemporaryFile()
        self._target = None
        self._stderr = sys.stderr
        os.dup2(self._scratch.fileno(), 2)
        if _writes_to_fd2(sys.stderr):
            sys.stderr = open(self.console, "w", buffering=1, encoding=sys.stderr.encoding or "utf-8",
                              errors="backslashreplace", closefd=False)

    def into(self, log_file):
        """From now on fd 2 appends to `log_file` (its folder created), after what was kept so far."""
        os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
        target = open(log_file, "ab")
        self._scratch.seek(0)
        shutil.copyfileobj(self._scratch, target)
        target.flush()
        os.dup2(target.fileno(), 2)
        self._scratch.close()
        if self._target is not None:
            self._target.close()
        self._target = target

    def close(self):
        """The console back on fd 2 and in sys.stderr."""
        if sys.stderr is not self._stderr:
            sys.stderr.flush()
            sys.stderr = self._stderr
        os.dup2(self.console, 2)
        os.close(self.console)
        for file in (self._scratch, self._target):
            if file is not None:
                file.close()
