"""`xlnet-tf sample-data`: every sample is written through xlnet_tf.files (ram:// here: nothing on the local disk)
and read back by the reader its finetune --task uses, with the counts the command printed; the demo's data
makers stay importable from xlnet_tf.demo (the README's earlier Quickstart imported them from there)."""

from __future__ import annotations

import re

import pytest

from xlnet_tf import files
from xlnet_tf.cli import main
from xlnet_tf.data import readers
from xlnet_tf.data.token_classification import read_conll
from xlnet_tf.sample_data import SAMPLES


def check(label, value, want):
    ok = value == want
    print(f"  CHECK {label}: {value} (want {want}) -> {'ok' if ok else 'FAILED'}")
    assert ok, label


def _run(task, folder, capsys):
    assert main(["sample-data", "--task", task, "--output-dir", folder]) == 0
    line = capsys.readouterr().out.strip()
    print(line)
    return [int(n) for n in re.findall(r"(\d+) (?:train|dev|paragraphs)", line)]


def _squad_questions(path):
    return len(readers.read_squad(path)[0])


READ_BACK = {
    "classification": lambda d: [len(readers.read_examples(files.join(d, n))[0]) for n in ("train.tsv", "dev.tsv")],
    "squad": lambda d: [_squad_questions(files.join(d, n)) for n in ("train.json", "dev.json")],
    "race": lambda d: [len(readers.read_race(files.join(d, n))[0]) for n in ("train", "dev")],
    "token-classification": lambda d: [len(read_conll(files.join(d, n))[0]) for n in ("train.txt", "dev.txt")],
}


@pytest.mark.parametrize("task", sorted(READ_BACK))
def test_each_task_sample_is_read_by_its_reader(task, capsys):
    folder = f"ram://sample-data/{task}"
    printed = _run(task, folder, capsys)
    check(f"{task}: printed train, dev counts are > 20 each", all(n > 20 for n in printed) and len(printed) == 2,
          True)
    check(f"{task}: read back (train, dev)", READ_BACK[task](folder), printed)


def test_the_corpus_has_documents_and_labels_balance(capsys):
    printed = _run("corpus", "ram://sample-data/corpus", capsys)
    text = files.read_text("ram://sample-data/corpus/corpus.txt")
    documents = [d for d in text.split("\n\n") if d.strip()]
    check("corpus paragraphs (non-blank lines) as printed", [sum(1 for line in text.splitlines() if line)], printed)
    check("corpus documents (one per topic, blank-line separated) > 50", len(documents) > 50, True)
    _run("classification", "ram://sample-data/balance", capsys)
    labels = [e.label for e in readers.read_examples("ram://sample-data/balance/train.tsv")[0]]
    counts = sorted(labels.count(label) for label in set(labels))
    check("classification train: two labels, within 10% of each other", len(counts) == 2 and
          counts[0] >= 0.9 * counts[1], True)


def test_the_demo_names_stay_importable():
    from xlnet_tf import demo, sample_data

    for name in ("write_corpus", "write_classification_task", "write_qa_task", "documentation_paragraphs"):
        check(f"xlnet_tf.demo.{name} is sample_data's", getattr(demo, name) is getattr(sample_data, name), True)


def test_an_unknown_task_gets_a_hint(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["sample-data", "--task", "ner", "--output-dir", "ram://x"])
    err = capsys.readouterr().err
    check("exit status", stopped.value.code, 2)
    check("hint towards token-classification", "did you mean 'token-classification'" in err, True)
    check("choices offered are SAMPLES", all(name in err for name in SAMPLES), True)
