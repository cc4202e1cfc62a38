"""Predictions that line up (issue #52): line N of `xlnet-tf predict`'s JSONL answers input row N, with its "row"
(data rows from 0), "line" (the file's line where the row starts, from 1) and "id" (the id column, when there is
one); a row skipped by --skip-bad-rows gets its "error" instead of a prediction. The Beam path (`predict
--export-dir`, in-process DirectRunner) gives every prediction and dead letter its "source" / "line" and id.

A tiny random-weight classifier (conftest's, no training); TSV (ids), CSV (no ids, a quoted field over two lines)
and JSONL (`guid`) inputs with bad rows. Every checked figure is printed with its bound."""

import glob
import json
import os

import numpy as np
import pytest

from conftest import tiny_config, tiny_finetuned_classifier

BOUND = 1e-6  # predict on the good rows alone vs the same rows among bad ones
BEAM_BOUND = 1e-5  # the export (its own graph) vs predict --model-dir, as tests/test_pipelines_predict.py
TEXTS = ["a fine film", "dull and slow", "the cast is good", "never again", "what a plot,\ntwists and all"]

# Each file: its bytes, and per row (line, id or MISSING: no "id" key, error or None).
MISSING = object()
INPUTS = {
    "a.tsv": (b"id\ttext\n"
              b"r-0\ta fine film\n"
              b"r-1\t\n"  # an empty text is a row, predicted (readers keep empty texts)
              b"r-2\tdull\tand slow\n"
              b"\n"  # a blank line is not a row
              b"r-3\tcaf\xe9 noir\n"
              b"r-4\tthe cast is good\n",
              [(2, "r-0", None), (3, "r-1", None), (4, "r-2", "expected 2 columns, found 3"),
               (6, None, "not valid UTF-8 (byte 0xe9)"), (7, "r-4", None)]),
    "b.csv": (b"text,note\n"
              b"never again,x\n"
              b'"what a plot,\ntwists and all",y\n'
              b"one,two,three\n"
              b"a fine film,z\n",
              [(2, MISSING, None), (3, MISSING, None), (5, MISSING, "expected 2 columns, found 3"),
               (6, MISSING, None)]),
    "c.jsonl": (b'{"guid": 10, "text": "dull and slow"}\n'
                b'{"guid": 11, "txt": "a typo"}\n'
                b'{"guid": 12, "text": "never closed\n'
                b"\n"
                b'{"guid": 13, "text": "the cast is good"}\n'
                b'{"guid": 14, "text": "caf\xe9"}\n',
                [(1, 10, None), (2, 11, "no field named 'text_a' nor one text field"), (3, None, "invalid JSON"),
                 (5, 13, None), (6, None, "not valid UTF-8 (byte 0xe9)")]),
}


def good_texts(name):
    """The texts of a file's good rows, in order."""
    return {"a.tsv": ["a fine film", "", "the cast is good"],
            "b.csv": ["never again", "what a plot,\ntwists and all", "a fine film"],
            "c.jsonl": ["dull and slow", "the cast is good"]}[name]


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("prediction_rows")
    (work / "in").mkdir()
    for name, (data, _) in INPUTS.items():
        (work / "in" / name).write_bytes(data)
    return work


@pytest.fixture(scope="module")
def model_dir(work):
    return tiny_finetuned_classifier(work, TEXTS, tiny_config(n_token=400), 32, seed=52)


def read_lines(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


@pytest.fixture(scope="module")
def predicted(work, model_dir):
    """{file name: its output lines} of `predict --skip-bad-rows` on each input, and "reference": the output of
    the good rows alone (one JSONL, ids under --id-column key, no --skip-bad-rows), through the command line."""
    from xlnet_tf.cli import main
    from xlnet_tf.training.finetune import predict

    out = {}
    for name in INPUTS:
        path = work / f"{name}.predictions.jsonl"
        predict(model_dir, str(work / "in" / name), str(path), batch_size=4, skip_bad_rows=True)
        out[name] = read_lines(path)
    reference = work / "good.jsonl"
    reference.write_text("".join(json.dumps({"key": f"{name}#{k}", "text": text}) + "\n" for name in INPUTS
                                 for k, text in enumerate(good_texts(name))), encoding="utf-8")
    path = work / "good.predictions.jsonl"
    assert main(["predict", "--model-dir", model_dir, "--input", str(reference), "--output", str(path),
                 "--id-column", "key", "--batch-size", "4"]) == 0
    out["reference"] = read_lines(path)
    return out


def test_every_row_has_its_line_with_skipped_rows(predicted):
    """One output line per input row, in order: its row, line and id; bad rows with their error."""
    for name, (_, rows) in INPUTS.items():
        lines = predicted[name]
        print(f"{name}: {len(lines)} output lines (expected {len(rows)}: one per row, blank lines and the header "
              "not rows)")
        assert len(lines) == len(rows)
        for number, (line, (at, row_id, error)) in enumerate(zip(lines, rows)):
            shown = {k: v for k, v in line.items() if k in ("row", "line", "id", "error")}
            print(f"  {shown} {'(prediction)' if 'probabilities' in line else ''}")
            assert line["row"] == number and line["line"] == at, (name, line)
            assert ("id" not in line) if row_id is MISSING else line["id"] == row_id, (name, line)
            if error is None:
                assert "error" not in line and set(line) >= {"label", "label_id", "probabilities"}, line
            else:
                assert line["error"].startswith(error) and "probabilities" not in line, (name, line)


def test_good_rows_equal_a_run_on_the_good_rows_alone(predicted):
    """The good rows' probabilities (and labels) equal those of predict on only the good rows; the reference run
    (no --skip-bad-rows, --id-column key) has rows, lines and ids too."""
    reference = predicted["reference"]
    keys = [f"{name}#{k}" for name in INPUTS for k in range(len(good_texts(name)))]
    aligned = ([line["row"] for line in reference] == list(range(len(keys)))
               and [line["line"] for line in reference] == list(range(1, len(keys) + 1))
               and [line["id"] for line in reference] == keys)
    print(f"reference: {len(reference)} lines (expected {len(keys)}), rows / lines / ids in order: {aligned}")
    assert len(reference) == len(keys) and aligned
    good = [line for name in INPUTS for line in predicted[name] if "error" not in line]
    got, want = np.array([line["probabilities"] for line in good]), np.array([line["probabilities"]
                                                                              for line in reference])
    diff = float(np.max(np.abs(got - want)))
    print(f"probabilities of {len(good)} good rows vs the good rows alone: max|diff| = {diff:.2e} (bound {BOUND:.0e})")
    assert got.shape == want.shape == (8, 3) and diff <= BOUND
    same = sum(a["label"] == b["label"] and a["label_id"] == b["label_id"] for a, b in zip(good, reference))
    print(f"labels equal: {same} of {len(good)} (expected {len(good)})")
    assert same == len(good)


def test_without_ids_or_skipping(work, model_dir):
    """A clean file without an id column and without --skip-bad-rows: rows and lines, no "id" key; --id-column
    naming a column the header lacks is refused."""
    from xlnet_tf.errors import UserError
    from xlnet_tf.training.finetune import predict

    path = work / "plain.tsv"
    path.write_text("text\n" + "".join(t.replace("\n", " ") + "\n" for t in TEXTS), encoding="utf-8")
    output = work / "plain.predictions.jsonl"
    count = predict(model_dir, str(path), str(output), batch_size=4)
    lines = read_lines(output)
    print(f"plain.tsv: {count} predictions, lines {[(line['row'], line['line']) for line in lines]}, "
          f"keys {sorted(lines[0])}")
    assert count == len(lines) == len(TEXTS)
    assert [(line["row"], line["line"]) for line in lines] == [(k, k + 2) for k in range(len(TEXTS))]
    assert all("id" not in line and "error" not in line for line in lines)
    with pytest.raises(UserError) as error:
        predict(model_dir, str(path), str(output), id_column="uid")
    print("--id-column uid:", error.value)
    assert "no column named 'uid'" in str(error.value)


def test_beam_predictions_carry_source_line_and_id(work, model_dir, predicted):
    """`predict --export-dir` (in-process DirectRunner) on the same files: each prediction and dead letter names
    its file and line, with the id predict --model-dir gives that line; probabilities equal."""
    from xlnet_tf.export.exporter import export_model
    from xlnet_tf.pipelines.common import pipeline_options
    from xlnet_tf.pipelines.predict import predict_beam

    export_dir = export_model(model_dir, work / "serving" / "cls")
    prefix = str(work / "beam" / "out")
    counts = predict_beam(export_dir, str(work / "in" / "*"), prefix, pipeline_options("DirectRunner", []),
                          batch_size=4)
    rows = sum(len(rows) for _, rows in INPUTS.values())
    print(f"counters: {counts} (expected rows_in {rows})")
    assert counts["rows_in"] == rows
    out, dead = [], []
    for path in sorted(glob.glob(prefix + "-*.jsonl")):
        (dead if "-dead-letter-" in path else out).extend(read_lines(path))
    by_place = {(name, line["line"]): line for name in INPUTS for line in predicted[name]}
    diffs, checked = [], 0
    for row in out + dead:
        file, line = row["source"].rsplit(":", 1)
        name = os.path.basename(file)
        model_line = by_place[(name, row["line"])]  # a KeyError: a line predict --model-dir has no row for
        assert int(line) == row["line"]
        if model_line.get("id") is not None and ("reason" not in row or row["id"] != row["source"]):
            assert row["id"] == model_line["id"], (row, model_line)
        else:  # no id (or, in a dead letter, a row of another column count): FILE:LINE, as before
            assert row["id"] == row["source"], row
        if "reason" in row:
            assert "error" in model_line, (row, model_line)
        else:
            assert "error" not in model_line, (row, model_line)
            diffs.append(float(np.max(np.abs(np.array(row["probabilities"]) -
                                              np.array(model_line["probabilities"])))))
        checked += 1
    print(f"Beam: {len(out)} predictions, {len(dead)} dead letters; {checked} of {rows} rows matched by "
          f"(file, line) to predict --model-dir's lines, ids equal")
    print("  e.g.", {k: out[0][k] for k in ("id", "source", "line")})
    assert checked == rows and len(out) == 8
    print(f"probabilities vs predict --model-dir: max|diff| = {max(diffs):.2e} (bound {BEAM_BOUND:.0e})")
    assert max(diffs) <= BEAM_BOUND


def test_token_classification_and_race_rows(tmp_path):
    """The other tasks' readers give the same rows: CoNLL sentences (from their first line; a bad line spoils its
    sentence), token JSONL with ids, RACE questions (ids FILEID-N; a file skipped whole is one row)."""
    from xlnet_tf.data.readers import InputRow, read_race
    from xlnet_tf.data.token_classification import read_conll, read_token_jsonl
    from xlnet_tf.tasks.base import aligned_predictions

    conll = tmp_path / "ner.txt"
    conll.write_bytes(b"EU B-ORG\nrejects O\n\nGerman B-MISC\ncall O X\n\n\xff O\n\nPeter B-PER\n")
    examples, report = read_conll(conll, tag_column=None, skip_bad_rows=True)
    print("CoNLL rows:", report["rows"])
    assert report["rows"] == [InputRow(1, None, None),
                              InputRow(4, None, "expected 2 columns (as on line 1), found 3 (line 5)"),
                              InputRow(7, None, "not valid UTF-8 (byte 0xff)"), InputRow(9, None, None)]
    lines = aligned_predictions(report, [{"tags": ["B-ORG", "O"]}, {"tags": ["B-PER"]}])
    print("aligned:", lines)
    assert lines == [{"row": 0, "line": 1, "tags": ["B-ORG", "O"]},
                     {"row": 1, "line": 4, "error": "expected 2 columns (as on line 1), found 3 (line 5)"},
                     {"row": 2, "line": 7, "error": "not valid UTF-8 (byte 0xff)"},
                     {"row": 3, "line": 9, "tags": ["B-PER"]}]

    jsonl = tmp_path / "ner.jsonl"
    jsonl.write_text('{"id": "s1", "tokens": ["EU"]}\n{"id": "s2", "tokens": "EU"}\n{"tokens": ["x"]}\n')
    _, report = read_token_jsonl(jsonl, skip_bad_rows=True)
    print("token JSONL rows:", report["rows"], "id column:", report["id_column"])
    assert report["id_column"] == "id" and report["rows"] == [
        InputRow(1, "s1", None), InputRow(2, "s2", "'tokens' must be a list of strings"), InputRow(3, None, None)]

    race = tmp_path / "race"
    race.mkdir()
    (race / "1.json").write_text(json.dumps({"id": "art", "article": "A.", "questions": ["q1?", "q2?"],
                                             "options": [["a", "b", "c", "d"], ["a", "b"]]}))
    (race / "2.json").write_text("{broken")
    _, report = read_race(race, skip_bad_rows=True)
    print("RACE rows:", report["rows"])
    assert [(r.id, r.error is None) for r in report["rows"]] == [("art-0", True), ("art-1", False), (None, False)]
    assert "needs 4 string options" in report["rows"][1].error and "2.json" in report["rows"][2].error
