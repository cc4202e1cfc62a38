"""`--squad-head simple` (transformers' XLNetForQuestionAnsweringSimple) end to end: fine-tuned from scratch on
the demo's extractive QA (with unanswerable questions added), its exact match above a bound, SQuAD 2.0 null
answers by the <cls> score, and the export's answers equal to `xlnet-tf predict`'s. Its logits' parity with
transformers is in test_heads."""

import json

import numpy as np
import pydoc_data.topics
import pytest

from xlnet_tf.cli import main

pytestmark = pytest.mark.slow  # trains, serves or starts processes: `make test` only, not `make test-quick`
# Fine-tuning steps: dev F1 was 54 / 64 / 67 after 100 / 200 / 300 steps of a 500-step run (best EM 66.5, bound 40),
# so the test runs 250.
STEPS = 250


def check(name, value, bound, ok):
    print(f"{name}: {value} (bound {bound})")
    assert ok, name


def with_unanswerable(path, every=5):
    """Every `every`-th paragraph of a demo QA file loses its quotes: its questions become unanswerable."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for k, article in enumerate(data["data"]):
        if k % every == 0:
            paragraph = article["paragraphs"][0]
            paragraph["context"] = paragraph["context"].replace('"', "")
            for qa in paragraph["qas"]:
                qa.update(is_impossible=True, answers=[])
    path.write_text(json.dumps(data), encoding="utf-8")
    return sum(len(a["paragraphs"][0]["qas"]) for a in data["data"][::every])


@pytest.fixture(scope="module")
def simple_qa(tmp_path_factory):
    from xlnet_tf.demo import write_qa_task

    root = tmp_path_factory.mktemp("simple_qa")
    write_qa_task(str(root))
    impossible = with_unanswerable(root / "dev.json")
    with_unanswerable(root / "train.json")
    lines = [line.strip() for _, text in sorted(pydoc_data.topics.topics.items())
             for line in text.splitlines() if line.strip()]
    (root / "corpus.txt").write_text("\n".join(lines[:3000]) + "\n", encoding="utf-8")
    assert main(["train-spm", "--input", str(root / "corpus.txt"), "--model-prefix", str(root / "spm"),
                 "--vocab-size", "800"]) == 0
    model_dir = root / "model"
    assert main(["finetune", "--task", "squad", "--squad-head", "simple", "--train-file", str(root / "train.json"),
                 "--eval-file", str(root / "dev.json"), "--spm-model", str(root / "spm.model"), "--model-size", "tiny",
                 "--model-dir", str(model_dir), "--max-seq-len", "96", "--max-query-len", "8",
                 "--train-steps", str(STEPS), "--batch-size", "16", "--learning-rate", "2e-3", "--warmup-steps", "20",
                 "--strategy", "one_device", "--steps-per-loop", "100", "--max-answer-length", "16"]) == 0
    return root, model_dir, impossible


def test_simple_head_learns_and_the_export_answers_as_predict(simple_qa, tmp_path):
    import tensorflow as tf

    from xlnet_tf.export.exporter import export_model

    root, model_dir, impossible = simple_qa
    config = json.loads((model_dir / "finetune_config.json").read_text())
    check("recorded head", (config["squad_head"], config["start_n_top"], config["max_answer_length"]),
          "('simple', 20, 16)", (config["squad_head"], config["start_n_top"], config["max_answer_length"])
          == ("simple", 20, 16))
    results = json.loads((model_dir / "eval_results.json").read_text())
    print(f"dev: {results['total']} questions, {impossible} unanswerable; EM {results['exact_match']:.1f}, "
          f"F1 {results['f1']:.1f}; with the best null threshold {results['best_exact_thresh']:.3f}: EM "
          f"{results['best_exact']:.1f}, HasAns EM {results['HasAns_exact']:.1f}, NoAns EM "
          f"{results.get('NoAns_exact', float('nan')):.1f}")
    check(f"best EM (demo QA from scratch, {STEPS} steps of 16)", f"{results['best_exact']:.1f}", ">= 40",
          results["best_exact"] >= 40)
    check("HasAns EM (answers found at all; a random span ~0)", f"{results['HasAns_exact']:.1f}", ">= 25",
          results["HasAns_exact"] >= 25)

    answers_file = tmp_path / "answers.json"
    assert main(["predict", "--model-dir", str(model_dir), "--input", str(root / "dev.json"),
                 "--output", str(answers_file)]) == 0
    answers = json.loads(answers_file.read_text(encoding="utf-8"))
    odds = json.loads((tmp_path / "answers.json.null_odds.json").read_text())
    check("predict: an answer and a null score per question", (len(answers), len(odds)), f"({results['total']},) * 2",
          len(answers) == len(odds) == results["total"])

    path = export_model(str(model_dir), str(tmp_path / "exports" / "qa"))
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    data = json.loads((root / "dev.json").read_text(encoding="utf-8"))["data"]
    questions = [(qa["id"], qa["question"], a["paragraphs"][0]["context"]) for a in data
                 for qa in a["paragraphs"][0]["qas"]]
    out = loaded(question=tf.constant([q for _, q, _ in questions]), context=tf.constant([c for _, _, c in questions]))
    served = [a.decode() for a in out["answer"].numpy()]
    same = sum(served[i] == answers[qid] for i, (qid, _, _) in enumerate(questions))
    check("export (serving_default) answers = predict's", f"{same} of {len(questions)}", "all",
          same == len(questions))
    spans = all(c[s:e] == a for (_, _, c), s, e, a in zip(questions, out["answer_start"].numpy(),
                                                          out["answer_end"].numpy(), served) if s >= 0)
    check("answer_start / answer_end slice the context", spans, True, spans)
    relative = out["null_score"].numpy() - out["score"].numpy()
    diff = max(abs(float(r) - odds[qid]) for r, (qid, _, _) in zip(relative, questions))
    check("export null_score - score vs predict's null odds, max |diff|", f"{diff:.2e}", "<= 1e-4", diff <= 1e-4)
    probability = out["no_answer_probability"].numpy()
    check("no_answer_probability = sigmoid(null_score - score)", np.allclose(probability, 1 / (1 + np.exp(-relative)),
                                                                             atol=1e-6), True,
          np.allclose(probability, 1 / (1 + np.exp(-relative)), atol=1e-6))
