"""The README's Quickstart and every guide's "Try it" section, run as written.

The Quickstart: its ```sh blocks under "## Quickstart", in order, in one bash process (`set -euo pipefail`)
whose working directory is a temporary folder (the repository root's stand-in, with `tests/` linked in), with
the virtualenv's `xlnet-tf` and `python` first on PATH. The blocks end with a served answer: the last one starts
`xlnet-tf serve` in the background, queries it and stops it. Checked: every block ran, the query printed one
label per text, the server stopped on the README's own `kill`, and the dev accuracy reached the bound the README
states ("requires dev accuracy >= X"), parsed from the README so that text and test cannot drift.

The guides: each page of docs/guides has a "## Try it" section whose ```sh blocks (and ```python blocks, run
with the venv's python) continue in the Quickstart's `quickstart` folder, one bash process per guide, in the
order of TOUR (a guide may use what an earlier one wrote, as its text says). Every guide is in TOUR or in
NOT_RUN with the reason. Checked per guide: exit status 0 and what its text says it writes. The ports the docs
name (8500, 8501) are swapped for free ones, so that no run meets another server.

Each script's `xlnet-tf` is tests/warm_cli.py's: every command runs in a process of its own, forked from one that
has TensorFlow imported already (a third of the tour's time was spent importing it again, once per command); the
console script itself runs as a program in tests/test_console.py, tests/test_cli_errors.py and tests/test_demo.py.
"""
from __future__ import annotations

import glob
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
GUIDES = os.path.join(ROOT, "docs", "guides")

# The guides' "Try it" sections in the order they run (later ones use what earlier ones wrote).
TOUR = ["tokenizer-and-data.md", "pretraining.md", "generation.md", "weights.md", "python-api.md",
        "fine-tuning/classification.md", "your-own-data.md", "fine-tuning/long-documents.md", "fine-tuning/squad.md",
        "fine-tuning/race.md", "fine-tuning/token-classification.md", "recompute.md", "export.md", "precision.md",
        "serving.md", "beam.md"]
# Guides without a "Try it", and why.
NOT_RUN = {
    "cloud-tpu.md": "needs a Cloud TPU and a gs:// bucket; its commands are the other guides' with --strategy tpu "
                    "(no TPU runs here: what a TPU compiles, the whole step under XLA, is run on CPU by "
                    "tests/test_pretraining.py, tests/test_buckets.py and tests/test_packing.py with --jit-compile)",
    "fine-tuning/index.md": "the overview of the task pages; its recipe is classification's, run there",
    "fine-tuning/batching.md": "explains --bucket-boundaries and --packing, whose defaults (auto) every "
                               "fine-tuning run above uses",
    "kubernetes.md": "needs a Kubernetes cluster (and KServe for the InferenceService); tests/test_kubernetes.py "
                     "checks every flag, port, path and mount of its manifests against the server",
}


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


def run_script(script, folder, name, timeout, launcher):
    """Runs `script` with bash (`set -euo pipefail`) in `folder`, in its own process group, with the launcher's
    `xlnet-tf` and the virtualenv's `python` first on PATH -> dict(returncode, output, seconds, left_running).
    Whatever happens, the whole process group is killed at the end, and with it the commands it started."""
    (folder / f"{name}.sh").write_text("set -euo pipefail\n" + script, encoding="utf-8")
    path = [launcher.bin, os.path.dirname(sys.executable), os.environ.get("PATH", "")]
    env = dict(os.environ, PATH=os.pathsep.join(path), TMPDIR=str(folder), PYTHONUNBUFFERED="1")
    env.pop("PYTHONPATH", None)
    began = time.monotonic()
    process = subprocess.Popen(["bash", str(folder / f"{name}.sh")], cwd=folder, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        output += f"\n[killed after {timeout} s]"
    finally:
        deadline = time.monotonic() + 30  # a script's `kill $!` asks its server to stop; give it time
        while (_group_alive(process.pid) or launcher.running()) and time.monotonic() < deadline:
            time.sleep(0.5)
        left_running = _group_alive(process.pid) or bool(launcher.running())
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                break
            time.sleep(1)
    seconds = time.monotonic() - began
    print(f"\n{name} took {seconds:.0f} s; its output:\n{output}")
    return dict(returncode=process.returncode, output=output, seconds=seconds, left_running=left_running)


def with_free_ports(script):
    """The ports the docs name (gRPC 8500, REST 8501) swapped for free ones, so a run never meets another server."""
    grpc, rest = free_port(), free_port()
    return script.replace("8500", str(grpc)).replace("8501", str(rest))


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory, warm_cli):
    """Runs the Quickstart once -> dict(returncode, output, folder (its working directory, the repository root's
    stand-in), seconds, blocks, left_running)."""
    work = tmp_path_factory.mktemp("quickstart")
    (work / "tests").symlink_to(os.path.join(ROOT, "tests"))  # the weights guide converts a test fixture
    blocks = shell_blocks(quickstart_section(readme()))
    result = run_script(with_free_ports("\n".join(blocks)), work, "quickstart", TIMEOUT_S, warm_cli)
    return dict(result, folder=work, blocks=blocks)


def test_the_quickstart_has_its_steps():
    blocks = shell_blocks(quickstart_section(readme()))
    text = "\n".join(blocks)
    for command in ("xlnet-tf train-spm", "xlnet-tf finetune", "xlnet-tf export", "xlnet-tf serve",
                    "xlnet-tf query", "kill"):
        check(f"a Quickstart block runs {command!r}", command in text, True, command in text)
    check("the last block queries the server it started", "xlnet-tf query" in blocks[-1] and
          "xlnet-tf serve" in blocks[-1], True, "xlnet-tf query" in blocks[-1] and "xlnet-tf serve" in blocks[-1])


@pytest.mark.slow
def test_every_block_runs_and_ends_with_a_served_answer(quickstart):
    check("the Quickstart's exit status", quickstart["returncode"], "0", quickstart["returncode"] == 0)
    texts = quickstart["blocks"][-1].count("--text ")
    answers = re.findall(r"^\[(\d+)\] .*: (code|prose) \(id \d\) p=", quickstart["output"], flags=re.M)
    check("answers printed by xlnet-tf query", len(answers), f"== {texts} (one per --text)", len(answers) == texts)
    check("the server stopped on the README's `kill`", not quickstart["left_running"], True,
          not quickstart["left_running"])


@pytest.mark.slow
def test_the_classifier_reaches_the_stated_accuracy(quickstart):
    bound = stated_bound(quickstart_section(readme()))
    written = sorted(quickstart["folder"].rglob("eval_results.json"))
    check("eval_results.json files written by finetune", [str(p.relative_to(quickstart["folder"])) for p in written],
          "one", len(written) == 1)
    accuracy = json.loads(written[0].read_text())["accuracy"]
    check("dev accuracy (chance 0.5)", round(accuracy, 4), f">= {bound} (the README's)", accuracy >= bound)
    exports = sorted(quickstart["folder"].rglob("saved_model.pb"))
    check("exports (saved_model.pb)", len(exports), ">= 1", len(exports) >= 1)


def try_it_blocks(guide):
    """The ```sh and ```python blocks of `guide`'s "## Try it" section, as bash lines, in order."""
    with open(os.path.join(GUIDES, guide), encoding="utf-8") as f:
        text = f.read()
    start = text.find("\n## Try it\n")
    if start < 0:
        return []
    end = text.find("\n## ", start + 1)
    section = text[start:end if end >= 0 else len(text)]
    blocks = []
    for m in re.finditer(r"^```(sh|python)\n(.*?)^```$", section, flags=re.S | re.M):
        blocks.append(m.group(2) if m.group(1) == "sh" else f"python - <<'PYTHON'\n{m.group(2)}PYTHON\n")
    return blocks


def every_guide():
    return sorted(os.path.relpath(p, GUIDES) for p in glob.glob(os.path.join(GUIDES, "**", "*.md"), recursive=True))


@pytest.fixture(scope="module")
def tour(quickstart, warm_cli):
    """Runs each TOUR guide's blocks in the Quickstart's folder -> {guide: dict(returncode, output, seconds,
    left_running)}."""
    assert quickstart["returncode"] == 0, "the Quickstart failed; the guides continue from its files"
    folder = quickstart["folder"] / "quickstart"
    results = {}
    for guide in TOUR:
        script = with_free_ports("\n".join(try_it_blocks(guide)))
        results[guide] = run_script(script, folder, "guide-" + guide.replace("/", "-")[:-3], TIMEOUT_S, warm_cli)
    print("seconds per guide: " + ", ".join(f"{g} {r['seconds']:.0f}" for g, r in results.items()))
    return dict(results, folder=folder)


def test_every_guide_runs_its_try_it_or_says_why_not():
    for guide in every_guide():
        blocks = try_it_blocks(guide)
        if guide in NOT_RUN:
            check(f"{guide}: not run ({NOT_RUN[guide]}); Try it blocks", len(blocks), "0", not blocks)
        else:
            check(f"{guide}: in the tour, Try it blocks", (guide in TOUR, len(blocks)), "(True, >= 1)",
                  guide in TOUR and len(blocks) >= 1)
    check("the tour names only guides that exist", sorted(set(TOUR) - set(every_guide())), "[]",
          set(TOUR) <= set(every_guide()))
    named = sorted({path for reason in NOT_RUN.values() for path in re.findall(r"tests/\w+\.py", reason)})
    missing = [path for path in named if not os.path.exists(os.path.join(ROOT, path))]
    check(f"test files the reasons name ({len(named)}) that do not exist", missing, "[]", not missing)


def _lines(path):
    with open(path, encoding="utf-8") as f:
        return [line for line in f if line.strip()]


def _json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _records(folder):
    import tensorflow as tf

    return sorted(bytes(r.numpy()) for r in tf.data.TFRecordDataset(sorted(glob.glob(str(folder / "*.tfrecord*")))))


def _dev_rows(folder):
    """Data rows of the Quickstart's dev.tsv (a header, then one row a line)."""
    return len(_lines(folder / "dev.tsv")) - 1


def _squad_questions(path):
    return sum(len(paragraph["qas"]) for article in _json(path)["data"] for paragraph in article["paragraphs"])


def _race_questions(folder):
    return sum(len(_json(path)["questions"]) for path in sorted(folder.glob("*.json")))


def _sentences(path):
    """Sentences of a CoNLL file (blank lines between them)."""
    with open(path, encoding="utf-8") as f:
        return len([block for block in f.read().split("\n\n") if block.strip()])


def _aligned(path):
    """The first two prediction lines' (row, id, whether the label is a name), and the number of lines."""
    rows = [json.loads(line) for line in _lines(path)]
    return [(r["row"], r["id"], r.get("label") in ("prose", "code")) for r in rows[:2]] + [len(rows)]


# What each guide's text says its lines produce, checked in the Quickstart's folder after they ran. Counts of
# examples are those of the files the lines read: the sample data is CPython's own documentation, whose text (and so
# the number of rows) changes from one CPython release to the next.
def _expectations(folder, output):
    return {
        "tokenizer-and-data.md": [("data/metadata.json seq_len", lambda: _json(folder / "data/metadata.json")
                                   ["seq_len"], 64)],
        "pretraining.md": [("pretrained/ files", lambda: sorted(
            n for n in ("xlnet_config.json", "spiece.model", "checkpoints", "training_curve.png")
            if (folder / "pretrained" / n).exists()), ["checkpoints", "spiece.model", "training_curve.png",
                                                       "xlnet_config.json"])],
        "generation.md": [("lines with prompt|continuation", lambda: len(re.findall(r"^The for statement\u2502",
                                                                                   output, flags=re.M)), 1)],
        "weights.md": [("converted/xlnet_config.json", lambda: (folder / "converted/xlnet_config.json").exists(),
                        True)],
        "python-api.md": [("printed shapes", lambda: "'sequence_output': (2, " in output, True)],
        "fine-tuning/classification.md": [
            ("from-pretrained/eval_results.json examples", lambda: _json(
                folder / "from-pretrained/eval_results.json")["examples"], lambda: _dev_rows(folder)),
            ("dev-predictions.jsonl lines", lambda: len(_lines(folder / "dev-predictions.jsonl")),
             lambda: _dev_rows(folder))],
        "your-own-data.md": [
            ("paragraphs/best/best.json metric", lambda: _json(folder / "paragraphs/best/best.json")["metric"],
             "accuracy"),
            ("recorded label names and values", lambda: tuple(
                tuple(_json(folder / "paragraphs/finetune_config.json")[k]) for k in ("label_names", "label_values")),
             (("prose", "code"), ("0", "1"))),
            ("prediction lines: dev rows in order, with their ids and a named label", lambda: _aligned(
                folder / "paragraphs-predictions.jsonl"),
             lambda: [(0, "dev-0", True), (1, "dev-1", True), _dev_rows(folder)]),
            ("served answer with a label name", lambda: len(re.findall(r"^\[0\] .*: (code|prose) \(id \d\) p=", output,
                                                                       flags=re.M)), 1)],
        "fine-tuning/long-documents.md": [("long_doc, max_doc_len recorded", lambda: tuple(
            _json(folder / "long-documents/finetune_config.json")[k] for k in ("long_doc", "max_doc_len")),
            ("memory", 128))],
        "fine-tuning/squad.md": [("squad-predictions.json answers", lambda: len(
            _json(folder / "squad-predictions.json")), lambda: _squad_questions(folder / "squad/dev.json"))],
        "fine-tuning/race.md": [("race-model/eval_results.json examples", lambda: _json(
            folder / "race-model/eval_results.json")["examples"], lambda: _race_questions(folder / "race/dev"))],
        "fine-tuning/token-classification.md": [("names-model/eval_results.json sentences", lambda: _json(
            folder / "names-model/eval_results.json")["sentences"], lambda: _sentences(folder / "names/dev.txt"))],
        "recompute.md": [("recomputed/train_log.jsonl last step", lambda: json.loads(_lines(
            folder / "recomputed/train_log.jsonl")[-1])["step"], 5)],
        "export.md": [("exports/encoder/1/saved_model.pb", lambda: (folder / "exports/encoder/1/saved_model.pb")
                       .exists(), True),
                      ("the loaded export answered probabilities", lambda: "'probabilities'" in output, True)],
        "precision.md": [("exports/docs-bfloat16/1 precision", lambda: _json(
            folder / "exports/docs-bfloat16/1/assets.extra/xlnet_export.json")["precision"], "bfloat16")],
        "serving.md": [("Classify answer lines", lambda: len(re.findall(r"^\[0\] .*: (code|prose)", output,
                                                                         flags=re.M)), 1),
                       ("REST predictions", lambda: '"predictions"' in output, True),
                       ("v2 infer outputs", lambda: '"outputs"' in output and '"probabilities"' in output, True)],
        "beam.md": [("Beam's records equal the records of tokenizer-and-data", lambda: _records(
            folder / "data-beam") == _records(folder / "data"), True)],
    }


@pytest.mark.slow
@pytest.mark.parametrize("guide", TOUR)
def test_the_guide_runs_as_written(tour, guide):
    result = tour[guide]
    check(f"{guide}: exit status", result["returncode"], "0", result["returncode"] == 0)
    check(f"{guide}: nothing left running", not result["left_running"], True, not result["left_running"])
    for label, value, want in _expectations(tour["folder"], result["output"])[guide]:
        got, want = value(), want() if callable(want) else want  # a count of the guide's input files, or a value
        check(f"{guide}: {label}", got, want, got == want)


@pytest.mark.slow
def test_the_launcher_runs_each_command_as_a_process_of_its_own(warm_cli, tmp_path):
    """The `xlnet-tf` of the scripts above (tests/warm_cli.py): a command works in the caller's folder, with its
    environment (TMPDIR: where the log of a command without a model directory goes) and its streams, and ends with
    the status a command of its own would; a signal to the caller reaches the command (serve stops gracefully and
    exits 0), and a caller killed outright takes its command with it."""
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, PATH=warm_cli.bin + os.pathsep + os.environ.get("PATH", ""), TMPDIR=str(tmp_path / "tmp"))

    def xlnet_tf(*args):
        return subprocess.Popen(["xlnet-tf", *args], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    made = xlnet_tf("sample-data", "--task", "classification", "--output-dir", "made")
    out, err = made.communicate(timeout=120)
    got = (made.returncode, sorted(os.listdir(tmp_path / "made")), "made" in out)
    check("sample-data: exit status, the files in the caller's folder, its summary on stdout", got,
          (0, ["dev.tsv", "train.tsv"], True), got == (0, ["dev.tsv", "train.tsv"], True))
    refused = xlnet_tf("query", "--server", "localhost:1", "--model", "m", "--text", "hi", "--retries", "0")
    out, err = refused.communicate(timeout=120)
    log = tmp_path / "tmp" / "xlnet-tf-logs" / "query.log"
    got = (refused.returncode, "no server answers at localhost:1" in err, out, log.exists())
    check("a query no server answers: exit status, its error on stderr, stdout, its log under the caller's TMPDIR",
          got, (2, True, "", True), got == (2, True, "", True))
    (tmp_path / "empty").mkdir()
    serving = xlnet_tf("serve", "--model-base-path", "empty", "--model-name", "m", "--port", "0", "--rest-api-port",
                       "-1")
    first = serving.stdout.readline()  # "serving gRPC HOST:PORT ...": its SIGTERM handler is in place
    command = warm_cli.running()
    serving.send_signal(signal.SIGTERM)
    out, _ = serving.communicate(timeout=120)
    got = (first.startswith("serving gRPC"), len(command), serving.returncode, "stopped (SIGTERM)" in out)
    check("serve, its caller sent SIGTERM: started, commands running, exit status (0: the server got the signal "
          "and stopped gracefully; the caller itself would end by the signal), 'stopped (SIGTERM)' printed", got,
          (True, 1, 0, True), got == (True, 1, 0, True))
    waiting = xlnet_tf("query", "--server", "localhost:1", "--model", "m", "--text", "hi", "--retries", "100000")
    deadline = time.monotonic() + 60
    while not warm_cli.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    command = warm_cli.running()
    waiting.kill()
    waiting.wait(timeout=60)  # not its streams: a command left running would hold them open
    deadline = time.monotonic() + 30
    while warm_cli.running() and time.monotonic() < deadline:
        time.sleep(0.1)
    got = (len(command), waiting.returncode, warm_cli.running())
    waiting.stdout.close()
    waiting.stderr.close()
    check("a query retrying for ever, its caller killed (SIGKILL): commands running before, the caller's status, "
          "commands running 30 s later at most", got, (1, -signal.SIGKILL, []), got == (1, -signal.SIGKILL, []))
