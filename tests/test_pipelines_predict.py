"""`xlnet-tf predict --export-dir ... --runner DirectRunner` (xlnet_tf.pipelines.predict): batch prediction from an
exported SavedModel as a Beam pipeline, against `xlnet-tf predict --model-dir` on the same rows.

A tiny fine-tuned classifier (test_export's) is exported; 1,000 rows in four files (two JSONL, TSV, TFRecord of
tf.train.Examples), 10 of them bad, go through one DirectRunner pipeline with two worker processes. Every
checked figure is printed with its bound.
"""

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import warm_command
from test_export import FINETUNED, LINES, UNICODE  # noqa: E402

BOUND = 1e-5
BEAM_OPTIONS = ["--runner", "DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("beam_predict")


@pytest.fixture(scope="module")
def model(work):
    """(fine-tuned directory, export BASE/NAME/VERSION) of a tiny 3-class classifier on `text`."""
    import keras

    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.heads import head_arguments, save_finetuned
    from xlnet_tf.tasks import build_head_model
    from xlnet_tf.tokenization import train_spm

    corpus = work / "corpus.txt"
    corpus.write_text("\n".join(LINES + UNICODE * 3) + "\n", encoding="utf-8")
    spm_dir = work / "spm_dir"
    spm_dir.mkdir()
    shutil.copy(train_spm(corpus, work / "spm", 1000, minloglevel=2, num_threads=2), spm_dir / "spiece.model")
    task, extra = FINETUNED["cls"]
    keras.utils.set_random_seed(100)
    finetune_config = {"task": task, "lower_case": False, "spm_model": "spiece.model", **extra}
    config = XLNetConfig(n_token=1000, d_model=32, n_layer=2, n_head=4, d_head=8, d_inner=64)
    head = build_head_model(task, config, RunOptions(dropout=0.0, dropatt=0.0, initializer_range=0.3),
                            **head_arguments(finetune_config))
    model_dir = str(work / "finetuned")
    save_finetuned(head, model_dir, finetune_config, extra_files=[str(spm_dir / "spiece.model")])
    return model_dir, export_model(model_dir, work / "serving" / "cls")


def _tfrecord(path, examples):
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for example in examples:
            writer.write(example if isinstance(example, bytes) else example.SerializeToString())


def _example(**features):
    import tensorflow as tf

    def feature(value):
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

    return tf.train.Example(features=tf.train.Features(feature={k: feature(v) for k, v in features.items()}))


@pytest.fixture(scope="module")
def inputs(work):
    """Writes the input files; returns ({id: text} of the 990 good rows, {source: (id, reason pattern)} of the
    10 bad ones)."""
    texts = iter([t for t in dict.fromkeys(LINES) if "\t" not in t][:900] + UNICODE[:4] + ["", "short"] * 43)
    folder = work / "in"
    folder.mkdir()
    good, bad = {}, {}

    def source(path, number):
        return f"{path}:{number}"

    def mark_bad(path, number, pattern, row_id=None):
        bad[source(path, number)] = (row_id or source(path, number), pattern)

    # JSONL with ids: 296 good, 4 bad
    path = folder / "a.jsonl"
    lines = []
    for i in range(296):
        text = next(texts)
        good[f"a-{i}"] = text
        lines.append(json.dumps({"id": f"a-{i}", "text": text, "label": "ignored"}).encode())
        if i == 10:
            lines.append(b'{"id": "a-bytes", "text": "caf\xe9 au lait"}')
            mark_bad(path, len(lines), r"not UTF-8: byte 0xe9 at byte 30 ")
        if i == 50:
            lines.append(b'{"id": "a-open", "text": "never closed}')
            mark_bad(path, len(lines), r"malformed JSON at column 26: Unterminated string starting$")
        if i == 100:
            lines.append(b'{"id": "a-missing", "txt": "a typo"}')
            mark_bad(path, len(lines), r"missing field 'text' \(the row has: id, txt\)", "a-missing")
        if i == 200:
            lines.append(b'{"id": "a-number", "text": 42}')
            mark_bad(path, len(lines), r"wrong type: field 'text' must be a string, got a number", "a-number")
    path.write_bytes(b"\n".join(lines) + b"\n")

    # JSONL without ids (ids FILE:LINE), CRLF line ends: 249 good, 1 bad
    path = folder / "b.json"
    lines = []
    for i in range(249):
        if i == 120:
            lines.append(b'["text", "in an array"]')
            mark_bad(path, len(lines), r"wrong type: each line must be a JSON object, got an array")
        text = next(texts)
        lines.append(json.dumps({"text": text}, ensure_ascii=False).encode())
        good[source(path, len(lines))] = text
    path.write_bytes(b"\r\n".join(lines) + b"\r\n")

    # TSV with a header: 248 good, 2 bad
    path = folder / "c.tsv"
    lines = [b"id\ttext"]
    for i in range(248):
        text = next(texts)
        lines.append(f"t-{i}\t{text}".encode())
        good[f"t-{i}"] = text
        if i == 30:
            lines.append(b"t-columns\tone\tcolumn too many")
            mark_bad(path, len(lines), r"wrong column count: 3 columns, the header \(line 1\) names 2")
        if i == 31:
            lines.append(b"t-bytes\tbad \xff byte")
            mark_bad(path, len(lines), r"not UTF-8: byte 0xff at byte 12 ")
    path.write_bytes(b"\n".join(lines) + b"\n")

    # TFRecord of Examples, int64 / bytes / no ids: 197 good, 3 bad
    path = folder / "d.tfrecord"
    records = []
    for i in range(197):
        text = next(texts)
        if i % 3 == 0:
            records.append(_example(id=7000 + i, text=text))
            good[7000 + i] = text
        elif i % 3 == 1:
            records.append(_example(id=f"r-{i}", text=text))
            good[f"r-{i}"] = text
        else:
            records.append(_example(text=text))
            good[source(path, len(records))] = text
        if i == 5:
            records.append(_example(id="r-missing", label="no text"))
            mark_bad(path, len(records), r"missing field 'text' \(the row has: id, label\)", "r-missing")
        if i == 6:
            records.append(_example(id="r-int", text=3))
            mark_bad(path, len(records), r"wrong type: feature 'text' must be a bytes_list holding a string, "
                                         r"got an int64_list", "r-int")
        if i == 7:
            records.append(b"\x07 not a protocol buffer")
            mark_bad(path, len(records), r"not a tf.train.Example")
    _tfrecord(path, records)
    assert next(texts, None) is None
    return good, bad


class BeamRun:
    """`xlnet-tf predict --export-dir` in its own process (forked by `launcher`, tests/conftest.py `warm_cli`;
    Beam's workers are processes of their own), started when made, so that the test computes its reference
    meanwhile; `result()` waits for it (once) -> (predictions, dead letters, counters, output files)."""

    def __init__(self, launcher, work, export_dir):
        self.work, self.console, self.value = work, work / "beam-predict.console.txt", None
        # An earlier run's shards under the same prefix (it had 3): removed, never mixed with this run's.
        (work / "out").mkdir()
        for name in ("predictions-00002-of-00003.jsonl", "predictions-dead-letter-00002-of-00003.jsonl"):
            (work / "out" / name).write_text(json.dumps({"id": "stale", "reason": "an earlier run"}) + "\n")
        command = warm_command(launcher, "predict", "--export-dir", export_dir, "--input", work / "in" / "*",
                               "--output", work / "out" / "predictions", "--batch-size", "16", *BEAM_OPTIONS)
        with open(self.console, "w", encoding="utf-8") as out:
            self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))

    def result(self):
        if self.value is None:
            self.process.wait(timeout=600)
            printed = self.console.read_text(encoding="utf-8", errors="replace")
            assert self.process.returncode == 0, printed[-3000:]
            summary = re.search(r"(\d+) rows in, (\d+) predicted -> .*, (\d+) failed ->", printed)
            print(summary.group(0))
            assert "removing 2 output shard(s) of an earlier run" in printed
            counts = dict(zip(("rows_in", "predicted", "failed"), map(int, summary.groups())))
            out = sorted(os.listdir(self.work / "out"))
            print("output files:", out)
            assert "predictions.log" in out  # Beam's and the workers' logs, off the console
            out.remove("predictions.log")
            predictions, dead = [], []
            for name in out:
                with open(self.work / "out" / name, encoding="utf-8") as f:
                    rows = [json.loads(line) for line in f]
                (dead if name.startswith("predictions-dead-letter-") else predictions).extend(rows)
            self.value = predictions, dead, counts, out
        return self.value

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="module")
def beam_run(work, model, inputs, warm_cli):
    run = BeamRun(warm_cli, work, model[1])
    yield run
    run.stop()


@pytest.mark.slow
def test_batch_prediction_matches_model_dir_predict(work, model, inputs, beam_run):
    from xlnet_tf.cli import main

    good, _ = inputs
    ids = list(good)
    reference_in, reference_out = work / "reference.jsonl", work / "reference_predictions.jsonl"
    reference_in.write_text("".join(json.dumps({"text_a": good[i]}) + "\n" for i in ids), encoding="utf-8")
    assert main(["predict", "--model-dir", model[0], "--input", str(reference_in), "--output",
                 str(reference_out)]) == 0
    reference = [json.loads(line) for line in reference_out.read_text(encoding="utf-8").splitlines()]

    predictions, _, counts, files = beam_run.result()  # the pipeline ran meanwhile
    assert all(re.fullmatch(r"predictions(-dead-letter)?-\d{5}-of-\d{5}\.jsonl", name) for name in files), files
    print(f"predictions: {len(predictions)} (expected 990)")
    assert len(predictions) == 990
    by_id = {row["id"]: row for row in predictions}
    print(f"distinct ids: {len(by_id)}; equal to the expected ids: {set(by_id) == set(good)}")
    assert len(by_id) == 990 and set(by_id) == set(good)
    got = np.array([by_id[i]["probabilities"] for i in ids])
    want = np.array([row["probabilities"] for row in reference])
    diff = float(np.max(np.abs(got - want)))
    print(f"probabilities of {len(ids)} rows vs predict --model-dir: max|diff| = {diff:.2e} (bound {BOUND:.0e})")
    assert got.shape == want.shape == (990, 3) and diff <= BOUND
    labels_equal = sum(by_id[i]["label"] == row["label"] and by_id[i]["label_id"] == row["label_id"]
                       for i, row in zip(ids, reference))
    print(f"labels equal to predict --model-dir: {labels_equal} of 990 (expected 990)")
    assert labels_equal == 990
    softmax = np.exp(np.array([by_id[i]["logits"] for i in ids]))
    softmax /= softmax.sum(-1, keepdims=True)
    diff = float(np.max(np.abs(softmax - got)))
    print(f"softmax(logits) vs probabilities: max|diff| = {diff:.2e} (bound {BOUND:.0e})")
    assert diff <= BOUND
    print(f"counters: {counts} (expected rows_in 1000, predicted 990, failed 10)")
    assert counts == {"rows_in": 1000, "predicted": 990, "failed": 10}


@pytest.mark.slow
def test_bad_rows_go_to_dead_letters_with_reasons(inputs, beam_run):
    _, bad = inputs
    _, dead, _, _ = beam_run.result()
    print(f"dead letters: {len(dead)} (expected 10)")
    assert len(dead) == 10
    by_source = {row["source"]: row for row in dead}
    assert set(by_source) == set(bad)
    for source, (row_id, pattern) in sorted(bad.items()):
        letter = by_source[source]
        print(f"{os.path.basename(source)}: id {os.path.basename(str(letter['id']))!r} (expected "
              f"{os.path.basename(str(row_id))!r}), reason {letter['reason']!r}, row {letter['row'][:50]!r}")
        assert letter["id"] == row_id, source
        assert re.match(pattern, letter["reason"]), (source, letter["reason"])
        assert letter["row"], source
    rows = [letter["row"] for letter in dead]
    assert '{"id": "a-bytes", "text": "caf\ufffd au lait"}' in rows  # not UTF-8: decoded with errors="replace"
    assert any('key: "label"' in row for row in rows)  # a TFRecord Example: its text format


def test_a_failing_batch_is_retried_row_by_row():
    """serving_default failing on a batch: only the rows that fail alone become failures, with the reason."""
    import tensorflow as tf

    from xlnet_tf.pipelines.predict import ExportModelHandler, InferenceFailure

    class Model:
        calls = []

        def predict(self, rows):
            self.calls.append(len(rows))
            if any(row["inputs"]["text"] == "boom" for row in rows):
                raise tf.errors.InvalidArgumentError(None, None, "assertion failed: [boom]\n\t [[{{node x}}]]")
            return [{"length": len(row["inputs"]["text"])} for row in rows]

    handler = ExportModelHandler("unused", batch_size=4)
    print("batch_elements_kwargs:", handler.batch_elements_kwargs())
    assert handler.batch_elements_kwargs() == {"min_batch_size": 1, "max_batch_size": 4}
    assert handler.share_model_across_processes() is False
    rows = [{"id": i, "source": f"f:{i}", "inputs": {"text": t}, "row": t} for i, t in enumerate(["a", "boom", "ccc"])]
    results = handler.run_inference(rows, Model())
    print("calls:", Model.calls, "results:", [r.inference for r in results])
    assert Model.calls == [3, 1, 1, 1]
    assert [r.example["id"] for r in results] == [0, 1, 2]
    assert results[0].inference == {"length": 1} and results[2].inference == {"length": 3}
    assert results[1].inference == InferenceFailure(
        "prediction failed: InvalidArgumentError: assertion failed: [boom]")


def test_csv_and_list_inputs_read_as_rows(tmp_path):
    """CSV (a quoted field over two lines, a JSON array column) for a RACE-like signature; a short options list
    and an unclosed quote become dead letters."""
    from xlnet_tf.pipelines.predict import read_file

    spec = {"article": ("string", [None]), "options": ("string", [None, 2])}
    path = tmp_path / "race.csv"
    path.write_text('options,article,id\n'
                    '"[""yes"", ""no""]","first line\nsecond line",q1\n'
                    '"[""only one""]",short,q2\n'
                    '"[""a"", ""b""]",no id,\n'
                    '"[""a"", ""b""]","never closed\n', encoding="utf-8")
    out = list(read_file(str(path), "csv", spec))
    rows = [value for kind, value in out if kind == "row"]
    dead = [json.loads(value) for kind, value in out if kind == "dead"]
    print("rows:", [(r["id"], r["inputs"]) for r in rows])
    print("dead:", [(d["source"].rsplit("/", 1)[-1], d["reason"]) for d in dead])
    assert [(r["id"], r["inputs"]) for r in rows] == [
        ("q1", {"article": "first line\nsecond line", "options": ["yes", "no"]}),
        ("", {"article": "no id", "options": ["a", "b"]})]
    assert [(d["id"], d["reason"]) for d in dead] == [
        ("q2", "wrong type: field 'options' must be a list of 2 strings, got a list of 1"),
        (f"{path}:6", "malformed CSV: a quoted field is not closed by the end of the file")]


def test_tfrecord_list_inputs_and_checksums(tmp_path):
    """TFRecord Examples with a multi-valued bytes feature for a [B, 2] input; a wrong count and a record whose
    data checksum fails become dead letters, and reading goes on."""
    from xlnet_tf.pipelines.predict import read_file

    spec = {"article": ("string", [None]), "options": ("string", [None, 2])}

    def example(row_id, article, options):
        import tensorflow as tf

        return tf.train.Example(features=tf.train.Features(feature={
            "id": tf.train.Feature(int64_list=tf.train.Int64List(value=[row_id])),
            "article": tf.train.Feature(bytes_list=tf.train.BytesList(value=[article.encode()])),
            "options": tf.train.Feature(bytes_list=tf.train.BytesList(value=[o.encode() for o in options]))}))

    path = tmp_path / "race.tfrecord"
    _tfrecord(path, [example(1, "zoë", ["yes", "no"]), example(2, "three", ["a", "b", "c"]),
                     example(3, "spoiled", ["x", "y"]), example(4, "last", ["p", "q"])])
    data = bytearray(path.read_bytes())
    third = data.index(b"spoiled")
    data[third] ^= 1  # one bit of the third record's data
    path.write_bytes(bytes(data))
    out = list(read_file(str(path), "tfrecord", spec))
    rows = [(value["id"], value["inputs"]) for kind, value in out if kind == "row"]
    dead = [(d["id"], d["reason"]) for d in (json.loads(value) for kind, value in out if kind == "dead")]
    print("rows:", rows)
    print("dead:", dead)
    assert rows == [(1, {"article": "zoë", "options": ["yes", "no"]}), (4, {"article": "last", "options": ["p", "q"]})]
    assert dead == [(2, "wrong type: field 'options' must be a list of 2 strings, got a list of 3"),
                    (f"{path}:3", f"corrupt TFRecord record: data checksum mismatch (byte {_record_offset(path, 3)})")]


def _record_offset(path, number):
    """Byte offset of TFRecord record `number` (from 1), from the framing's length fields."""
    import struct

    data, offset = path.read_bytes(), 0
    for _ in range(number - 1):
        offset += 16 + struct.unpack("<Q", data[offset:offset + 8])[0]
    return offset


def test_bad_predict_flags_name_them(tmp_path, capsys):
    from xlnet_tf.cli import main

    (tmp_path / "x.jsonl").write_text("{}\n")  # exists: the flags are checked, not the path
    code = main(["predict", "--model-dir", str(tmp_path), "--input", str(tmp_path / "x.jsonl"), "--output",
                 str(tmp_path / "y"), "--runner", "DirectRunner"])
    err = capsys.readouterr().err
    with capsys.disabled():
        print(err.strip())
    assert code == 2 and "--runner" in err and "--model-dir" in err and "--export-dir" in err
    for argv, wanted in ([[], "one of the arguments --model-dir --export-dir is required"],
                         [["--model-dir", "m", "--export-dir", "e"], "not allowed with argument"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["predict", *argv, "--input", "x", "--output", str(tmp_path / "y")])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        with capsys.disabled():
            print(err)
        assert exit_info.value.code == 2 and wanted in err
    code = main(["predict", "--export-dir", str(tmp_path), "--input", str(tmp_path / "x.jsonl"), "--output",
                 str(tmp_path / "y")])
    err = capsys.readouterr().err
    with capsys.disabled():
        print(err.strip())
    assert code == 2 and "--export-dir" in err and "no saved_model.pb" in err
