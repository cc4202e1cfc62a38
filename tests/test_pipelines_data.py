"""`create-pretraining-data --runner DirectRunner`: the Beam pipeline writes the single-process command's
records byte for byte, whatever the number of workers; counts and names bad lines; `pretrain` reads its output.

The corpus is CPython's documentation (as in test_pretraining_data), cut into three files read through a glob,
with one line that is not UTF-8. The pipelines run with `direct_running_mode=multi_processing` (workers are
separate processes). Files are local paths: a gs:// bucket cannot be reached here, so the filesystem layer
(`BeamFiles`, Beam's FileSystems) is tested on the local filesystem.
"""

import json
import os
import subprocess
from collections import Counter

import pytest
import tensorflow as tf

from conftest import warm_command
from test_pretraining_data import corpus_lines
from xlnet_tf.cli import main
from xlnet_tf.data.pretraining import create_pretraining_data, load_metadata
from xlnet_tf.pipelines.common import BeamFiles, pipeline_options
from xlnet_tf.pipelines.pretraining_data import create_pretraining_data_beam


def _written_metadata(directory):
    with open(os.path.join(directory, "metadata.json"), encoding="utf-8") as f:
        return json.load(f)

SEQ, REUSE, SHARDS, SEED = 64, 32, 3, 7
BAD_LINE = 40  # line number of the undecodable line in part-1.txt
SETTINGS = dict(seq_len=SEQ, reuse_len=REUSE, num_shards=SHARDS, seed=SEED, bi_data=True)


def direct(workers):
    return ["--runner", "DirectRunner", f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("beam-data")


@pytest.fixture(scope="module")
def corpus(work):
    """(glob of three files, the undecodable file, the spm model)."""
    from xlnet_tf.tokenization import train_spm

    lines = corpus_lines()
    lines = lines[:len(lines) // 2]
    folder = work / "text"
    folder.mkdir()
    n = len(lines)
    parts = [lines[i * n // 3:(i + 1) * n // 3] for i in range(3)]  # cut inside documents too
    for i, part in enumerate(parts):
        data = ("\n".join(part) + "\n").encode("utf-8").split(b"\n")
        if i == 1:
            data.insert(BAD_LINE - 1, b"an undecodable \xff\xfe line")
        (folder / f"part-{i}.txt").write_bytes(b"\n".join(data))
    (work / "all.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    spm = train_spm([str(work / "all.txt")], str(work / "spm"), 1000, num_threads=2, minloglevel=2)
    return str(folder / "part-*.txt"), str(folder / "part-1.txt"), spm


@pytest.fixture(scope="module")
def single(work, corpus):
    pattern, _, spm = corpus
    return create_pretraining_data([pattern], spm, work / "single", skip_bad_lines=True, progress=False, **SETTINGS)


def shard_files(data_dir):
    metadata = load_metadata(data_dir)
    names = [s["file"] for s in metadata["shards"] + metadata["bwd_shards"]]
    return {name: open(os.path.join(data_dir, name), "rb").read() for name in names}


def records(data_dir):
    """Every serialized record of the directory (both directions), as a multiset."""
    paths = sorted(os.path.join(data_dir, name) for name in shard_files(data_dir))
    return Counter(r.numpy() for r in tf.data.TFRecordDataset(paths))


def data_command(pattern, spm, output_dir, *extra):
    """The arguments of `xlnet-tf create-pretraining-data` on the corpus."""
    return ["create-pretraining-data", "--input", pattern, "--spm-model", spm, "--output-dir", str(output_dir),
            "--seq-len", str(SEQ), "--reuse-len", str(REUSE), "--num-shards", str(SHARDS), "--seed", str(SEED),
            "--bi-data", *extra]


def pretrain_command(data_dir, model_dir):
    """The arguments of a one-step `xlnet-tf pretrain`."""
    return ["pretrain", "--data-dir", str(data_dir), "--model-dir", str(model_dir), "--model-size", "tiny",
            "--train-steps", "1", "--batch-size", "4", "--num-predict", "8", "--steps-per-loop", "1", "--seed", "3"]


@pytest.fixture(scope="module")
def beside(work, corpus, single, warm_cli):
    """Commands in their own processes (forked by tests/conftest.py's `warm_cli`; Beam's workers are processes of
    their own) while the tests go on: the pipeline with one worker process, the pipeline without --skip-bad-lines,
    pretraining on the single-process records. name -> (process, console log file)."""
    pattern, _, spm = corpus
    commands = {"one": data_command(pattern, spm, work / "beam-1", "--skip-bad-lines", *direct(1)),
                "bad": data_command(pattern, spm, work / "beam-bad", *direct(1)),
                "pretrain": pretrain_command(single["output_dir"], work / "pretrain-single")}
    started = {}
    for name, command in commands.items():
        log = work / f"{name}.console.txt"
        with open(log, "w", encoding="utf-8") as out:
            started[name] = (subprocess.Popen(warm_command(warm_cli, *command), stdout=out, stderr=subprocess.STDOUT,
                                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")), log)
    yield started
    for process, _ in started.values():
        if process.poll() is None:  # a test failed before waiting for it
            process.kill()
            process.wait()


def finished(run, timeout=600):
    """(exit code, console text) of a `beside` command."""
    process, log = run
    process.wait(timeout=timeout)
    return process.returncode, log.read_text(encoding="utf-8", errors="replace")


@pytest.mark.slow
def test_beam_writes_the_single_process_records(work, corpus, single, beside):
    pattern, _, spm = corpus
    expected_files, expected_records = shard_files(single["output_dir"]), records(single["output_dir"])
    expected_metadata = load_metadata(single["output_dir"])
    assert expected_metadata["skipped_lines"] == 1 and len(expected_metadata["input_files"]) == 3

    two = create_pretraining_data_beam([pattern], spm, str(work / "beam-2"), pipeline_options("DirectRunner", direct(
        2)[2:]), skip_bad_lines=True, **SETTINGS)
    counters = two["counters"]
    wanted = {"documents": single["documents"], "tokens": single["tokens"], "bad_utf8_lines_skipped": 1,
              "records": 2 * single["num_records"]}
    print(f"\n[beam data] Beam counters {counters} (expected {wanted})")
    assert counters == wanted

    code, console = finished(beside["one"])
    assert code == 0, console[-3000:]
    assert "Beam counters: bad_utf8_lines_skipped 1" in console
    for name, directory in (("2 workers", work / "beam-2"), ("1 worker (CLI)", work / "beam-1")):
        got_files = shard_files(directory)
        same = sum(got_files.get(f) == data for f, data in expected_files.items())
        got_records = records(directory)
        print(f"[beam data] {name}: {same} of {len(expected_files)} shard files byte-identical to the single-process "
              f"ones (bound: all); records as a multiset: {sum(got_records.values())} == "
              f"{sum(expected_records.values())}, equal: {got_records == expected_records}")
        assert same == len(expected_files) and set(got_files) == set(expected_files)
        assert got_records == expected_records
        load_metadata(directory)  # valid; the file itself equals the single-process one (its paths relative)
        assert _written_metadata(directory) == _written_metadata(single["output_dir"])
        assert set(os.listdir(directory)) - {"xlnet-tf.log"} == set(expected_files) | {"metadata.json", "spiece.model"}
    print(f"[beam data] metadata.json equal to the single-process one ({expected_metadata['num_records']} records per "
          f"direction, is_next {expected_metadata['is_next_records']}); token chunks removed")


@pytest.mark.slow
def test_bad_line_is_named_without_skip(work, corpus, beside):
    _, bad_file, _ = corpus
    code, console = finished(beside["bad"])
    wanted = f"xlnet-tf create-pretraining-data: error: {bad_file}:{BAD_LINE}: line is not valid UTF-8"
    said = [line for line in console.splitlines() if "error:" in line]
    print(f"\n[beam data] without --skip-bad-lines: exit code {code} (bound 2), the console says {said}")
    assert code == 2 and len(said) == 1 and said[0].startswith(wanted)
    assert not os.path.exists(work / "beam-bad" / ".tokens") and not os.path.exists(work / "beam-bad" / "metadata.json")


@pytest.mark.slow
def test_pretrain_first_step_loss_is_the_same(work, beside):
    assert main(pretrain_command(work / "beam-2", work / "pretrain-beam")) == 0
    code, console = finished(beside["pretrain"])
    assert code == 0, console[-3000:]
    losses = {}
    for name in ("single", "beam"):
        with open(work / f"pretrain-{name}" / "train_log.jsonl") as f:
            losses[name] = json.loads(f.readline())["loss"]
    print(f"\n[beam data] first-step pretraining loss on Beam records {losses['beam']!r} == on single-process records "
          f"{losses['single']!r} (bound: equal)")
    assert losses["beam"] == losses["single"]


def test_beam_files_on_the_local_filesystem(tmp_path):
    """BeamFiles, the layer every pipeline read and write goes through, on local paths."""
    files = BeamFiles()
    folder = files.join(str(tmp_path), "a", "b")
    files.makedirs(folder)
    files.makedirs(folder)  # exists already: no error
    path = files.join(folder, "x.bin")
    with files.open(path, "wb") as f:
        f.write(b"0123456789")
    with files.open(path, "rb") as f:
        f.seek(3)
        middle = f.read(4)
    files.rename(path, files.join(folder, "y.bin"))
    files.write_records(files.join(folder, "r.tfrecord"), [b"one", b"two"])
    read_back = [r.numpy() for r in tf.data.TFRecordDataset(files.join(folder, "r.tfrecord"))]
    listed = [os.path.basename(p) for p in files.glob(files.join(folder, "*"))]
    print(f"\n[beam files] seek+read {middle!r}, size {files.size(files.join(folder, 'y.bin'))}, glob {listed}, "
          f"TFRecords read back by TensorFlow {read_back}")
    assert middle == b"3456" and files.size(files.join(folder, "y.bin")) == 10
    assert listed == ["r.tfrecord", "y.bin"] and read_back == [b"one", b"two"]
    files.remove_tree(files.join(str(tmp_path), "a"))
    assert not os.path.exists(tmp_path / "a")


def test_only_the_pipelines_import_beam():
    """The default install never needs Beam: outside xlnet_tf/pipelines no module imports apache_beam, and
    xlnet_tf.pipelines is imported only inside the CLI functions that run a pipeline."""
    import ast

    import xlnet_tf

    root = os.path.dirname(os.path.dirname(os.path.abspath(xlnet_tf.__file__)))
    offenders, checked = [], 0
    for folder in ("xlnet_tf", "export", "serving", "benchmarks"):
        for directory, _, names in os.walk(os.path.join(root, folder)):
            if os.path.basename(directory) == "pipelines":
                continue
            for name in (n for n in names if n.endswith(".py")):
                path = os.path.join(directory, name)
                tree = ast.parse(open(path, encoding="utf-8").read())
                checked += 1
                for node in ast.walk(tree):
                    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                        [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                    for module in modules:
                        at_top = node in tree.body
                        if module.startswith("apache_beam") or (module.startswith("xlnet_tf.pipelines") and at_top):
                            offenders.append(f"{os.path.relpath(path, root)}:{node.lineno}: {module}")
    print(f"\n[beam extra] {checked} modules outside xlnet_tf/pipelines checked; Beam imports found: {offenders} "
          "(bound: none)")
    assert checked > 50 and not offenders


@pytest.mark.slow
def test_beam_resolves_with_tensorflow_and_serving():
    """The pinned Beam release installs beside TensorFlow, TF Text, tensorflow-serving-api and protobuf: every
    requirement of every installed distribution is met (pip check)."""
    import subprocess
    import sys
    from importlib.metadata import version

    names = ("apache-beam", "tensorflow", "tensorflow-text", "tensorflow-serving-api", "protobuf", "grpcio")
    versions = {name: version(name) for name in names}
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    print(f"\n[beam extra] installed together: {versions}; pip check: {check.stdout.strip()} (rc {check.returncode}, "
          "bound 0)")
    assert versions["apache-beam"].startswith("2.77.") and versions["tensorflow"].startswith("2.21.")
    assert check.returncode == 0, check.stdout + check.stderr


def test_token_chunks_on_gcs_are_opened_for_small_random_reads(monkeypatch):
    """Random reads of the token stream on gs:// ask Beam's GCS reader for a small buffer (its default fetches
    16 MiB at every seek). No bucket is reachable here, so the GCS filesystem is a stand-in that records the
    call; a local path is opened as usual."""
    from apache_beam.io.filesystems import FileSystems

    from xlnet_tf.pipelines import common

    asked = []

    class StandInGcsIO:
        def open(self, path, mode, read_buffer_size):
            asked.append((path, mode, read_buffer_size))
            return "reader"

    class StandInGcsFileSystem:
        def _gcsIO(self):
            return StandInGcsIO()

    monkeypatch.setattr(FileSystems, "get_filesystem", staticmethod(lambda path: StandInGcsFileSystem()))
    got = BeamFiles().open_random("gs://bucket/data/.tokens/000000.tokens")
    print(f"\n[beam files] gs:// token chunk opened with {asked} (bound: buffer <= 1 MiB, Beam's default 16 MiB)")
    assert got == "reader" and asked == [("gs://bucket/data/.tokens/000000.tokens", "rb", common.RANDOM_READ_BUFFER)]
    assert common.RANDOM_READ_BUFFER <= 1 << 20
