"""README.md's Quickstart, run as written: its ```sh blocks under "## Quickstart", in order, in one bash process
(`set -euo pipefail`) whose working directory is a temporary folder, with the virtualenv's `xlnet-tf` and
`python` first on PATH. The blocks end with a served answer: the last one starts `xlnet-tf serve` in the
background, queries it and stops it. The ports the README names (8500, 8501) are swapped for free ones, so that
the test never meets another server. Whatever happens, the whole process group is killed at the end.

Checked: every block ran, the query printed one label per text, the server stopped on the README's own `kill`,
and the dev accuracy reached the bound the README states ("requires dev accuracy >= X"), parsed from the README
so that text and test cannot drift.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TIMEOUT_S = 900  # the README promises well under 15 minutes on 2 CPU cores


def check(label, value, bound, ok):
    print(f"  CHECK {label}: {value} (bound: {bound}) -> {'ok' if ok else 'FAILED'}")
    assert ok, f"{label}: {value} (bound: {bound})"


def readme():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        return f.read()


def quickstart_section(text):
    start = text.index("\n## Quickstart\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def shell_blocks(section):
    """The ```sh blocks of `section`, in order."""
    return [m.group(1) for m in re.finditer(r"^```sh\n(.*?)^```$", section, flags=re.S | re.M)]


def stated_bound(section):
    match = re.search(r"requires\s+dev\s+accuracy\s+>=\s+(\d+(?:\.\d+)?)", section)
    assert match, "the Quickstart states no 'requires dev accuracy >= X'"
    return float(match.group(1))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid):
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie leader keeps the group "alive" for killpg: look for members that still run
    try:
        members = subprocess.run(["ps", "-o", "stat=", "-g", str(pgid)], capture_output=True, text=True).stdout
    except OSError:
        return True
    return any(state and not state.startswith("Z") for state in members.split())


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """Runs the Quickstart once -> dict(returncode, output, folder (its working directory), seconds, blocks,
    left_running)."""
    work = tmp_path_factory.mktemp("quickstart")
    blocks = shell_blocks(quickstart_section(readme()))
    grpc, rest = free_port(), free_port()
    script = "set -euo pipefail\n" + "\n".join(
        block.replace("8500", str(grpc)).replace("8501", str(rest)) for block in blocks)
    (work / "quickstart.sh").write_text(script, encoding="utf-8")
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
               TMPDIR=str(work), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    began = time.monotonic()
    process = subprocess.Popen(["bash", str(work / "quickstart.sh")], cwd=work, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    left_running = False
    try:
        output, _ = process.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n[killed after {TIMEOUT_S} s]"
    finally:
        deadline = time.monotonic() + 30  # the README's `kill $!` asks the server to stop; give it time
        while _group_alive(process.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        left_running = _group_alive(process.pid)
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(1)
    seconds = time.monotonic() - began
    print(f"\nQuickstart ({len(blocks)} blocks) took {seconds:.0f} s; its output:\n{output}")
    return dict(returncode=process.returncode, output=output, folder=work, seconds=seconds,
                blocks=blocks, left_running=left_running)


def test_the_quickstart_has_its_steps():
    blocks = shell_blocks(quickstart_section(readme()))
    text = "\n".join(blocks)
    for command in ("xlnet-tf train-spm", "xlnet-tf finetune", "xlnet-tf export", "xlnet-tf serve",
                    "xlnet-tf query", "kill"):
        check(f"a Quickstart block runs {command!r}", command in text, True, command in text)
    check("the last block queries the server it started", "xlnet-tf query" in blocks[-1] and
          "xlnet-tf serve" in blocks[-1], True, "xlnet-tf query" in blocks[-1] and "xlnet-tf serve" in blocks[-1])


def test_every_block_runs_and_ends_with_a_served_answer(quickstart):
    check("the Quickstart's exit status", quickstart["returncode"], "0", quickstart["returncode"] == 0)
    texts = quickstart["blocks"][-1].count("--text ")
    answers = re.findall(r"^\[(\d+)\] .*: (code|prose) \(id \d\) p=", quickstart["output"], flags=re.M)
    check("answers printed by xlnet-tf query", len(answers), f"== {texts} (one per --text)", len(answers) == texts)
    check("the server stopped on the README's `kill`", not quickstart["left_running"], True,
          not quickstart["left_running"])


def test_the_classifier_reaches_the_stated_accuracy(quickstart):
    bound = stated_bound(quickstart_section(readme()))
    written = sorted(quickstart["folder"].rglob("eval_results.json"))
    check("eval_results.json files written by finetune", [str(p.relative_to(quickstart["folder"])) for p in written],
          "one", len(written) == 1)
    accuracy = json.loads(written[0].read_text())["accuracy"]
    check("dev accuracy (chance 0.5)", round(accuracy, 4), f">= {bound} (the README's)", accuracy >= bound)
    exports = sorted(quickstart["folder"].rglob("saved_model.pb"))
    check("exports (saved_model.pb)", len(exports), ">= 1", len(exports) >= 1)
