"""`xlnet-tf finetune --label-names` (issue #52): a CSV whose labels are 0 / 1 fine-tuned as negative / positive.
The names are recorded (label_names, the file's values as label_values), `predict`'s lines and the export carry
them, and so does every served answer of one in-process server: gRPC Predict and Classify (`Client`, `xlnet-tf
query`), REST /v1 :predict and :classify and the Open Inference Protocol's REST infer; `evaluate` on the 0 / 1 dev
file (and on the same file labelled with the names) scores as the run's own eval_results.json; a count that does
not match, a repeated name, a value the file lacks and a task without class labels are refused with status 2 and
one line naming --label-names. Every checked figure is printed with its bound (run with -s)."""

from __future__ import annotations

import argparse
import io
import json
import urllib.request

import pytest

from conftest import check, refused, run_cli as run
from xlnet_tf.cli import main

NAMES = ["negative", "positive"]
GOOD = ["good", "great", "wonderful", "lovely", "superb", "pleasant"]
BAD = ["bad", "awful", "terrible", "boring", "dull", "poor"]
FORMS = ["the film was {}", "a {} story", "what a {} day", "the food was {} today"]
STEPS = 20


def rows():
    """(sentence, "0" / "1"): every form with every word, 1 for the good words."""
    return [(form.format(word), str(int(word in GOOD))) for form in FORMS for word in GOOD + BAD]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """train.csv (41 rows) and dev.csv (7 rows: an odd count, so that no accuracy equals the 1 - accuracy of swapped
    names) labelled 0 / 1, dev-named.csv (dev.csv labelled with the names), a SentencePiece model and a tiny config
    (d_model 32, 2 layers)."""
    from conftest import tiny_config, tiny_spm

    root = tmp_path_factory.mktemp("label-names")
    data = rows()
    train, dev = [r for i, r in enumerate(data) if i % 7], [r for i, r in enumerate(data) if not i % 7]
    for name, part, named in (("train.csv", train, False), ("dev.csv", dev, False), ("dev-named.csv", dev, True)):
        (root / name).write_text("sentence,label\n" + "".join(f"{t},{NAMES[int(v)] if named else v}\n"
                                                              for t, v in part), encoding="utf-8")
    tiny_config(n_token=400).to_json(str(root / "config.json"))
    return {"root": root, "spm": tiny_spm(root, [t for t, _ in data]), "dev": dev}


def finetune_argv(inputs, model_dir, *names):
    root = inputs["root"]
    return ["finetune", "--task", "classification", "--train-file", root / "train.csv", "--eval-file",
            root / "dev.csv", "--spm-model", inputs["spm"], "--config", root / "config.json", "--model-dir", model_dir,
            "--train-steps", STEPS, "--batch-size", 8, "--learning-rate", "3e-3", "--strategy", "one_device",
            "--steps-per-loop", 10, "--dropout", 0, "--dropatt", 0, "--max-seq-len", 16, "--label-names", *names]


@pytest.fixture(autouse=True)
def _logs_in_tmp(tmp_path, monkeypatch):
    """The commands' $TMPDIR/xlnet-tf-logs files under this test's folder."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))


@pytest.fixture(scope="module")
def trained(inputs):
    """`finetune --label-names negative,positive` (20 steps) and its export under BASE/sst/1."""
    root = inputs["root"]
    model_dir, base = root / "model", root / "exports" / "sst"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("tempfile.tempdir", str(root))
        assert main([str(a) for a in finetune_argv(inputs, model_dir, ",".join(NAMES))]) == 0
        assert main(["export", "--model-dir", str(model_dir), "--export-base", str(base)]) == 0
    return {**inputs, "model_dir": model_dir, "base": base}


@pytest.fixture(scope="module")
def server(trained):
    from xlnet_tf.serving import serve

    instance = serve(model_base_path=str(trained["base"]), model_name="sst", port=0, rest_api_port=0,
                     poll_interval=0).start()
    yield instance
    instance.stop()


def test_names_parsed_and_checked_against_the_file(tmp_path):
    """The flag's three forms, and each refusal's words (no data file read: `name_labels` is given the values)."""
    from xlnet_tf.data.labels import name_labels, parse_label_names, renamed, sorted_labels
    from xlnet_tf.data.readers import TextExample
    from xlnet_tf.errors import UserError

    check("NAME,NAME parsed", parse_label_names(" negative, positive"), "('negative', 'positive')",
          parse_label_names(" negative, positive") == ("negative", "positive"))
    (tmp_path / "names.txt").write_text("negative\n\npositive\n", encoding="utf-8")
    from_file = parse_label_names(f"@{tmp_path / 'names.txt'}")
    check("@FILE: a name a line (a blank line skipped)", from_file, "('negative', 'positive')",
          from_file == ("negative", "positive"))
    pairs = parse_label_names("1=positive,0=negative")
    check("VALUE=NAME pairs parsed", pairs, "{'1': 'positive', '0': 'negative'}",
          pairs == {"1": "positive", "0": "negative"})
    check("names of 0, 1 (pairs in any order)", name_labels(["0", "1"], pairs, "t.csv"), NAMES,
          name_labels(["0", "1"], pairs, "t.csv") == NAMES)
    order = sorted_labels({"10", "2", "1"})
    check("the order NAME,NAME names the values in (whole numbers: numeric)", order, "['1', '2', '10']",
          order == ["1", "2", "10"])
    read = [TextExample("a", label="1"), TextExample("b", label="negative"), TextExample("c", label=("0", "1")),
            TextExample("d")]
    got = [e.label for e in renamed(read, ["0", "1"], NAMES)]
    check("a file's labels read by a named model (a value, a name, a multi-label set, none)", got,
          "['positive', 'negative', ('negative', 'positive'), None]",
          got == ["positive", "negative", ("negative", "positive"), None])
    for given, words in (("a,a", ["--label-names", "'a' twice"]), ("0=a,0=b", ["--label-names", "'0' twice"]),
                         ("a,1=b", ["--label-names", "not a mix"]), ("a,,b", ["--label-names", "empty"])):
        with pytest.raises(UserError) as error:
            parse_label_names(given)
        check(f"--label-names {given}: refused", str(error.value), f"names {words}",
              all(w in str(error.value) for w in words))
    for given, words in ((("a", "b", "c"), ["--label-names", "3 names", "t.csv: 0, 1"]),
                         ({"0": "a", "2": "b"}, ["--label-names", "'2'", "t.csv: 0, 1"]),
                         ({"0": "a"}, ["--label-names", "1 name", "t.csv: 0, 1"]),
                         (("1", "0"), ["--label-names", "another label's value", "t.csv: 0, 1"])):
        with pytest.raises(UserError) as error:
            name_labels(["0", "1"], given, "t.csv")
        check(f"{given} for the values 0, 1: refused", str(error.value), f"names {words}",
              all(w in str(error.value) for w in words))


def test_refusals_exit_2_with_one_line(inputs, tmp_path, capsys):
    """Before any training: a count that does not match, a repeated name, a value the file lacks, another task."""
    model_dir = tmp_path / "model"
    cases = [("count mismatch", ["negative,neutral,positive"], ["--label-names", "3 names", "0, 1", "train.csv"]),
             ("repeated name", ["good,good"], ["--label-names", "'good' twice"]),
             ("value not in the file", ["0=negative,2=positive"], ["--label-names", "'2'", "0, 1", "train.csv"])]
    for label, names, words in cases:
        refused(label, finetune_argv(inputs, model_dir, *names), capsys, *words)
    regression = finetune_argv(inputs, model_dir, "negative,positive")
    regression[regression.index("classification")] = "regression"
    refused("--task regression", regression, capsys, "--label-names are for --task classification and multi-label")
    written = sorted(p.name for p in model_dir.iterdir() if p.suffix != ".log") if model_dir.exists() else []
    check("files the refused runs wrote (besides logs)", written, "[]", written == [])


@pytest.mark.slow
def test_recorded_and_evaluate_scores_as_eval_results(trained, capsys):
    model_dir = trained["model_dir"]
    config = json.loads((model_dir / "finetune_config.json").read_text())
    check("finetune_config label_names / label_values / num_labels",
          (config["label_names"], config.get("label_values"), config["num_labels"]),
          (NAMES, ["0", "1"], 2), (config["label_names"], config.get("label_values"), config["num_labels"]) ==
          (NAMES, ["0", "1"], 2))
    record = json.loads(next(trained["base"].glob("1/assets.extra/xlnet_export.json")).read_text())
    check("xlnet_export.json label_names", record["label_names"], NAMES, record["label_names"] == NAMES)
    own = json.loads((model_dir / "eval_results.json").read_text())
    for dev in ("dev.csv", "dev-named.csv"):
        code, out, err = run(["evaluate", "--model-dir", model_dir, "--eval-file", trained["root"] / dev], capsys)
        check(f"evaluate {dev}: exit status", code, "0", code == 0)
        results = json.loads(out[out.index("{"):])
        check(f"evaluate {dev}: metrics vs eval_results.json's (f1, mcc: of label id 1, positive)", results,
              f"equal to {own}", results == own)


def served_labels(rows_or_values):
    return [v.decode() if isinstance(v, bytes) else v for v in rows_or_values]


@pytest.mark.slow
def test_predict_and_served_answers_carry_the_names(trained, server, tmp_path, capsys):
    from xlnet_tf.serving.cli import add_query_arguments, query_main
    from xlnet_tf.serving import Client

    texts = [t for t, _ in trained["dev"]]
    output = tmp_path / "predictions.jsonl"
    code, out, err = run(["predict", "--model-dir", trained["model_dir"], "--input", trained["root"] / "dev.csv",
                          "--output", output], capsys)
    check("predict: exit status", code, "0", code == 0)
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    predicted = [line["label"] for line in lines]
    check("predict: lines, labels", (len(lines), sorted(set(predicted))), f"({len(texts)}, among {NAMES})",
          len(lines) == len(texts) and set(predicted) <= set(NAMES))
    own = json.loads((trained["model_dir"] / "eval_results.json").read_text())["accuracy"]
    right = sum(label == NAMES[int(value)] for label, (_, value) in zip(predicted, trained["dev"])) / len(texts)
    check("predict's names vs dev.csv's 0 / 1 named in order: accuracy", right,
          f"eval_results.json's {own} (swapped names: {1 - own})", right == own)

    client = Client(server.grpc_target, "sst")
    check("gRPC: export metadata label_names", client.export_metadata()["label_names"], NAMES,
          client.export_metadata()["label_names"] == NAMES)
    answers = client.predict({"text": texts})
    grpc_labels = served_labels(answers["label"])
    answered = {"gRPC Predict": grpc_labels}
    classified = client.classify(texts, api="classify")
    check("gRPC Classify: classes of every row", sorted({tuple(r["classes"]) for r in classified}), [tuple(NAMES)],
          {tuple(r["classes"]) for r in classified} == {tuple(NAMES)})
    answered["gRPC Classify"] = [r["label"] for r in classified]
    parser = add_query_arguments(argparse.ArgumentParser())
    printed = io.StringIO()
    query = ["--server", server.grpc_target, "--model", "sst", "--json"] + [a for t in texts for a in ("--text", t)]
    code = query_main(parser.parse_args(query), out=printed)
    check("xlnet-tf query: exit status", code, "0", code == 0)
    answered["xlnet-tf query"] = [r["label"] for r in json.loads(printed.getvalue())["results"]]

    def post(path, body):
        request = urllib.request.Request(server.rest_url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    answered["REST /v1 :predict"] = [p["label"] for p in post("/v1/models/sst:predict",
                                                                {"instances": texts})["predictions"]]
    results = post("/v1/models/sst:classify", {"signature_name": "classification",
                                                "examples": [{"text": t} for t in texts]})["results"]
    check("REST /v1 :classify: classes of every row", sorted({tuple(c for c, _ in row) for row in results}),
          [tuple(NAMES)], {tuple(c for c, _ in row) for row in results} == {tuple(NAMES)})
    answered["REST /v1 :classify"] = [max(row, key=lambda pair: pair[1])[0] for row in results]
    v2 = post("/v2/models/sst/infer", {"inputs": [{"name": "text", "shape": [len(texts)], "datatype": "BYTES",
                                                   "data": texts}], "outputs": [{"name": "label"}]})
    answered["v2 REST infer"] = served_labels(next(o for o in v2["outputs"] if o["name"] == "label")["data"])
    for api, labels in answered.items():
        check(f"{api}: labels", labels, f"{len(texts)} of {NAMES}, gRPC Predict's",
              len(labels) == len(texts) and set(labels) <= set(NAMES) and labels == grpc_labels)
    margins = [abs(p[0] - p[1]) for p in answers["probabilities"].tolist()]
    clear = [i for i, m in enumerate(margins) if m > 1e-3]  # rows whose answer no rounding can flip
    same = sum(predicted[i] == grpc_labels[i] for i in clear)
    check("served labels vs predict's (rows with |p0 - p1| > 1e-3)", f"{same} of {len(clear)}", "all",
          same == len(clear))
