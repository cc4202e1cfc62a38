"""`xlnet-tf` for scripts that run many commands (the Quickstart and the guides' "Try it" sections,
tests/test_guides.py) and for the commands tests start beside their own work (tests/conftest.py, `warm_cli`),
without importing TensorFlow once per command.

A fresh `xlnet-tf` process spends about 3 s (one core) importing TensorFlow, Keras and the rest before it does
anything: half of a short command's time, and a third of the guides' tour. `WarmLauncher` starts one process that
imports them, without starting TensorFlow's runtime (no thread pools, no devices: those are made in each child),
and forks a child per command; its `bin` folder holds an `xlnet-tf` executable, for a script to find first on its
PATH. The child takes the caller's standard streams, working directory, environment and arguments and runs
`xlnet_tf.cli.main()` as the console script does; its exit status (or the signal that ended it) becomes the
caller's. A signal sent to the caller (a script's `kill $!`) goes on to the child, and a caller that dies takes its
child with it. The console script itself, as a program of its own, is what tests/test_console.py,
tests/test_cli_errors.py and tests/test_demo.py run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import sys

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
_HEADER = struct.Struct("!I")  # the length of the JSON request that follows the streams


# ----------------------------------------------------------------------------------------------------
# The caller: one command


def run(path, args):
    """Runs `xlnet-tf ARGS` in a child of the server at `path`; ends this process as the child ended."""
    request = json.dumps({"argv": ["xlnet-tf", *args], "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    socket.send_fds(connection, [_HEADER.pack(len(request))], [0, 1, 2])
    connection.sendall(request)
    reader = connection.makefile("r", encoding="utf-8")
    child = int(reader.readline().split()[1])  # "pid N"

    def forward(number, frame):
        try:
            os.kill(child, number)
        except ProcessLookupError:  # it has just ended: its status is on its way
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    line = reader.readline()  # "exit STATUS", or nothing if the server went away
    if not line:
        print(f"xlnet-tf (warm launcher): the server at {path} went away before command {args} ended",
              file=sys.stderr)
        os._exit(70)
    code = os.waitstatus_to_exitcode(int(line.split()[1]))
    if code < 0:  # ended by a signal: end the same way
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


# ----------------------------------------------------------------------------------------------------
# The server: imports once, forks per command


def _warm_up():
    """Imports what the commands import, and builds what they all compute the same way, without starting
    TensorFlow's runtime (a forked child could not use its threads)."""
    import keras  # noqa: F401
    import matplotlib.pyplot  # noqa: F401
    import sentencepiece  # noqa: F401
    import tensorflow  # noqa: F401
    import tensorflow_text  # noqa: F401

    import xlnet_tf.cli  # noqa: F401
    import xlnet_tf.export.exporter  # noqa: F401
    import xlnet_tf.model  # noqa: F401
    import xlnet_tf.plots  # noqa: F401
    import xlnet_tf.tasks  # noqa: F401
    import xlnet_tf.training.finetune  # noqa: F401
    import xlnet_tf.training.loop  # noqa: F401
    from xlnet_tf.tokenization import _unicode_tables

    _unicode_tables()


def _threads():
    return sorted(os.listdir("/proc/self/task"))


def _child(streams, request):
    """In the forked child: becomes the caller's command (never returns)."""
    import atexit
    import tempfile
    import threading
    import traceback

    for sig in FORWARDED + (signal.SIGCHLD,):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
    for target, fd in enumerate(streams):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # read TMPDIR again
    sys.argv = request["argv"]
    sys.path[0] = os.path.dirname(sys.executable)  # a console script's own folder (the server's was tests/)
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", buffering=1, errors="backslashreplace", closefd=False)
    code = 1
    try:
        from xlnet_tf.cli import main

        code = main()
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            threading._shutdown()  # as an interpreter ends: its threads first, then its exit functions
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code or 0)


def serve(path):
    """Listens at `path`; one child per request; its pid, then its wait status, written back to the caller. A
    caller that hangs up before its child ended: the child is sent SIGTERM, then SIGKILL 10 s later."""
    import selectors
    import time

    import numpy  # noqa: F401  (its OpenBLAS threads: OpenBLAS makes them again in a forked child)

    before = _threads()
    _warm_up()
    started = [t for t in _threads() if t not in before]
    if started:
        raise SystemExit(f"warm launcher: the imports started threads {started}; a forked child would lack them")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children = {}  # pid -> [connection, killed at (monotonic) or None]
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(timeout=0.05):
            if key.fileobj is listener:
                connection, _ = listener.accept()
                message, streams, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
                size, = _HEADER.unpack(message)
                data = b""
                while len(data) < size:
                    data += connection.recv(size - len(data))
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other, _ in children.values():
                        other.close()
                    connection.close()
                    _child(streams, json.loads(data))
                for fd in streams:
                    os.close(fd)
                connection.sendall(f"pid {pid}\n".encode())
                children[pid] = [connection, None]
                selector.register(connection, selectors.EVENT_READ, pid)
            else:  # a caller hung up (it sends nothing after its request)
                selector.unregister(key.fileobj)
                entry = children.get(key.data)
                if entry is not None and entry[1] is None:
                    os.kill(key.data, signal.SIGTERM)
                    entry[1] = time.monotonic()
        for pid, entry in list(children.items()):
            if entry[1] is not None and time.monotonic() - entry[1] > 10:
                os.kill(pid, signal.SIGKILL)
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            connection, hung_up = children.pop(pid)
            if hung_up is None:
                selector.unregister(connection)
                try:
                    connection.sendall(f"exit {status}\n".encode())
                except OSError:
                    pass
            connection.close()


class WarmLauncher:
    """The forking process, started in the test process's environment (what TensorFlow reads at import is
    the same as a fresh command would read); a context manager. `bin`: a folder with the `xlnet-tf` that
    runs a command through it (`folder`/bin); `running()` -> the pids of commands not yet ended."""

    def __init__(self, folder):
        import subprocess
        import tempfile

        self.socket_folder = tempfile.mkdtemp(prefix="warm-cli-")  # short: a socket's path has at most 107 bytes
        self.socket = os.path.join(self.socket_folder, "socket")
        self.log = open(os.path.join(folder, "warm-cli.log"), "w", encoding="utf-8")
        self.process = subprocess.Popen([sys.executable, __file__, "serve", self.socket], stdout=subprocess.PIPE,
                                        stderr=self.log, stdin=subprocess.DEVNULL, text=True)
        ready = self.process.stdout.readline().strip()
        if ready != "ready":
            self.close()
            with open(self.log.name, encoding="utf-8") as f:
                raise RuntimeError(f"the warm launcher did not start: {ready!r}; its log:\n{f.read()[-3000:]}")

        self.bin = os.path.join(folder, "bin")
        self._install(self.bin)

    def _install(self, folder):
        os.makedirs(folder, exist_ok=True)
        script = os.path.join(folder, "xlnet-tf")
        with open(script, "w", encoding="utf-8") as f:
            f.write(f"#!{sys.executable} -IS\nimport sys\nsys.path.insert(0, {os.path.dirname(__file__)!r})\n"
                    f"import warm_cli\nwarm_cli.run({self.socket!r}, sys.argv[1:])\n")
        os.chmod(script, 0o755)

    def running(self):
        import subprocess

        listed = subprocess.run(["ps", "-o", "pid=,stat=", "--ppid", str(self.process.pid)], capture_output=True,
                                text=True).stdout.split("\n")
        return [int(line.split()[0]) for line in listed if line.strip() and not line.split()[1].startswith("Z")]

    def close(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()
        shutil.rmtree(self.socket_folder, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


if __name__ == "__main__":  # the forking process: serve SOCKET (prints "ready" when its imports are done)
    serve(sys.argv[2])
