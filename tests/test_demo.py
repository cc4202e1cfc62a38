"""`xlnet-tf demo --quick` end to end in a fresh work directory, its metrics against stated bounds, the
second run reusing the first; and `xlnet-tf plot-attention` on the model it pretrained."""

import json
import os
import subprocess
import sys

import pytest

from xlnet_tf.cli import main

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`

# Lines of other libraries that belong in the log file, not on the console (what each comes from).
THIRD_PARTY = {"SentencePiece's trainer": "trainer_interface.cc", "absl's checkpoint sharding": "Sharding callback",
               "SavedModel's input renaming": "with unsupported characters which will be renamed"}


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`xlnet-tf demo --quick` as a user runs it (its own process, so that the console can be read)."""
    workdir = tmp_path_factory.mktemp("demo")
    done = subprocess.run([sys.executable, "-m", "xlnet_tf.cli", "demo", "--workdir", str(workdir), "--quick"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:]
    return workdir, done.stdout


@pytest.fixture(scope="module")
def demo_dir(demo_run):
    return demo_run[0]


def test_console_shows_the_demo_and_the_log_file_the_rest(demo_run):
    workdir, console = demo_run
    log = (workdir / "xlnet-tf.log").read_text(encoding="utf-8", errors="replace")
    for what, marker in THIRD_PARTY.items():
        print(f"{what} ({marker!r}): {console.count(marker)} console lines (bound 0), {log.count(marker)} in "
              f"xlnet-tf.log (bound > 0)")
        assert marker not in console and marker in log
    print(f"console: {len(console.splitlines())} lines in all")
    assert "xlnet-tf demo summary" in console and "== sentencepiece" in console


def test_quick_demo_metrics(demo_dir):
    summary = json.loads((demo_dir / "summary.json").read_text())
    first, last = summary["pretraining_loss"]
    accuracy = summary["classifier"]["accuracy"]
    em, f1 = summary["qa"]["exact_match"], summary["qa"]["f1"]
    print(f"pretraining loss {first} -> {last} (bound: falls by > 1.0)")
    print(f"classifier accuracy {accuracy:.3f} (bound >= 0.70; chance 0.5)")
    print(f"QA EM {em:.1f} / F1 {f1:.1f} (bounds >= 20 / >= 25; chance: ~1-2 for picking a span of a 60-word paragraph)")
    print(f"total {summary['seconds']} s (bound: quick mode under 300 s on 2 cores; not asserted, machine-dependent)")
    assert last < first - 1.0
    assert accuracy >= 0.70
    assert em >= 20 and f1 >= 25
    serving = summary["serving"]
    print(f"served and queried: {serving['qa_examples']}, latency {serving['latency_ms']}, exit {serving['server_exit_code']}")
    assert serving["server_exit_code"] == 0 and serving["classify_example"]["label"] in ("code", "prose")
    for name in ("classifier", "qa"):
        assert os.path.exists(os.path.join(summary["exports"][name], "saved_model.pb"))
    assert os.path.exists(summary["curves"])


def test_second_run_reuses_everything(demo_dir):
    assert main(["demo", "--workdir", str(demo_dir), "--quick"]) == 0
    summary = json.loads((demo_dir / "summary.json").read_text())
    rebuilt = [name for name, info in summary["steps"].items() if not info["reused"]]
    print(f"steps rebuilt on the second run: {rebuilt} (bound: none)")
    assert rebuilt == []


def test_plot_attention(demo_dir, tmp_path):
    output = tmp_path / "attention.png"
    assert main(["plot-attention", "--model-dir", str(demo_dir / "pretrained"), "--text",
                 'The "assert" statement inserts debugging assertions.', "--output", str(output)]) == 0
    from xlnet_tf.plots import attention_maps

    tokens, probs = attention_maps(str(demo_dir / "pretrained"), "a short text")
    sums = probs.sum(-1)
    print(f"attention rows sum to 1: max |sum - 1| = {abs(sums - 1).max():.1e} (bound 1e-5); shape {probs.shape}")
    assert abs(sums - 1).max() <= 1e-5 and probs.shape[2] == len(tokens)
    assert output.stat().st_size > 10_000 and output.read_bytes()[:4] == b"\x89PNG"
