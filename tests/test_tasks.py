"""`xlnet_tf.tasks`: the registry (names in the CLI's order, an unknown name refused with the valid ones and the
CLI's hint), what the tasks say of their rows (the tables finetune keeps under their old names), FinetuneSetup
refusing another task's options from Python with the command line's messages, and the configs of converted
heads. Nothing here builds a model or imports TensorFlow."""

from __future__ import annotations

import subprocess
import sys

import pytest

from xlnet_tf import tasks
from xlnet_tf.errors import UserError
from xlnet_tf.training import finetune
from xlnet_tf.training.finetune import FinetuneSetup

NAMES = ("classification", "regression", "squad", "race", "token-classification", "multi-label")


def check(label, value, want):
    ok = value == want
    print(f"  CHECK {label}: {value} (want {want}) -> {'ok' if ok else 'FAILED'}")
    assert ok, label


def setup(task, **options):
    return FinetuneSetup(task=task, train_file="train", model_dir="model", config=None, run_options=None,
                         spm_model=None, **options)


def test_registry():
    check("TASK_NAMES", tasks.TASK_NAMES, NAMES)
    check("get(name).name", [tasks.get(name).name for name in NAMES], list(NAMES))
    check("the language model's export task", (tasks.LANGUAGE_MODEL.name, tasks.LANGUAGE_MODEL.min_seq_len({})),
          ("lm", 1))
    check("'lm' is no fine-tuning task", "lm" in tasks.TASK_NAMES, False)
    with pytest.raises(UserError) as error:
        tasks.get("ner")
    print(f"  get('ner'): {error.value}")
    check("get('ner') names every task and hints", all(n in str(error.value) for n in NAMES)
          and "did you mean 'token-classification'?" in str(error.value), True)


@pytest.mark.slow
def test_the_registry_is_cheap_to_import():
    """The CLI lists TASK_NAMES for --task: `import xlnet_tf.tasks` loads neither numpy nor TensorFlow."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, xlnet_tf.tasks; "
                             "print(sorted({'numpy', 'tensorflow', 'keras'} & set(sys.modules)))"],
                            capture_output=True, text=True, check=True).stdout.strip()
    check("numpy / tensorflow / keras loaded by `import xlnet_tf.tasks`", loaded, "[]")


def test_rows_as_finetune_knew_them():
    encoder = ("input_ids", "segment_ids", "padding_mask")
    check("INPUTS", finetune.INPUTS, {**{n: encoder for n in NAMES}, "squad": encoder + ("p_mask", "cls_index")})
    check("LABELS", finetune.LABELS, {**{n: ("label_ids",) for n in NAMES},
                                      "squad": ("start_positions", "end_positions", "is_impossible")})
    check("LEFT_PADDED", finetune.LEFT_PADDED, {**{n: True for n in NAMES}, "squad": False})
    check("tasks that pack", [n for n in NAMES if tasks.get(n).packs],
          ["classification", "regression", "race", "multi-label"])
    check("per-position outputs", {n: tasks.get(n).position_outputs for n in NAMES if tasks.get(n).position_outputs},
          {"squad": ("start_logits", "end_logits"), "token-classification": ("logits",)})
    check("default doc stride at max_seq_len 64", [tasks.get(n).default_doc_stride(64) for n in NAMES],
          [128, 128, 128, 128, 31, 128])
    check("Classify / Regress signatures", {n: tasks.get(n).example_methods for n in NAMES
                                             if tasks.get(n).example_methods},
          {"classification": {"classification": "tensorflow/serving/classify"},
           "regression": {"regression": "tensorflow/serving/regress"},
           "multi-label": {"classification": "tensorflow/serving/classify"}})
    check("export's shortest max_seq_len", [tasks.get(n).min_seq_len({"max_query_len": 16}) for n in NAMES],
          [3, 3, 20, 4, 3, 3])


REFUSED = [
    ("classification", {"tag_column": 2}, "--tag-column and --label-all-pieces are for --task token-classification"),
    ("squad", {"label_separator": ";"}, "--label-separator and --tune-thresholds are for --task multi-label"),
    ("race", {"squad_head": "simple"}, "--squad-head and --max-answer-length are for --task squad"),
    ("token-classification", {"columns": {"text_a": "body"}},
     "--text-a-column, --text-b-column and --label-column are for --task classification, regression and multi-label"),
    ("multi-label", {"tune_thresholds": True}, "--tune-thresholds tunes on --eval-file: give one"),
    ("squad", {"squad_head": "pointer"}, "--squad-head must be one of beam, simple, got 'pointer'"),
    ("squad", {"max_answer_length": 0}, "--max-answer-length must be at least 1, got 0"),
    ("regression", {"doc_stride": 0}, "--doc-stride must be at least 1, got 0"),
    ("token-classification", {"long_doc": "memory", "max_doc_len": 512},
     "--long-doc memory is for classification, regression and race; token classification reads long sentences as "
     "--doc-stride windows"),
    # The command line's check, now FinetuneSetup's (a Python caller's memory flags without --long-doc memory were
    # ignored, and mem_len > 0 crashed the first step).
    ("classification", {"mem_len": 64}, "--max-doc-len, --mem-len and --grad-segments need --long-doc memory"),
    ("regression", {"label_names": "low,high"}, "--label-names are for --task classification and multi-label"),
    ("token-classification", {"label_names": "O,B-X"}, "--label-names are for --task classification and multi-label"),
    ("classification", {"label_names": "a,a"}, "--label-names gives the name 'a' twice (each label has one name): "
     "'a,a'"),
    ("race", {"grad_segments": 1}, "--max-doc-len, --mem-len and --grad-segments need --long-doc memory"),
]


@pytest.mark.parametrize("task, options, message", REFUSED)
def test_finetune_setup_refuses(task, options, message):
    with pytest.raises(UserError) as error:
        setup(task, **options)
    check(f"FinetuneSetup(task={task!r}, {options})", str(error.value), message)


def test_finetune_setup_takes_its_own_options():
    taken = [setup("token-classification", tag_column=2, label_all_pieces=True).tag_column,
             setup("multi-label", label_separator=";", tune_thresholds=True, eval_file="dev").label_separator,
             setup("squad", squad_head="simple", max_answer_length=30).squad_head,
             setup("regression", columns={"label": "score"}).columns,
             setup("classification", columns={}).columns,
             setup("classification", label_names="negative, positive").label_names,
             setup("multi-label", label_names="1=b,0=a").label_names]
    check("options taken by their tasks", taken, [2, ";", "simple", {"label": "score"}, None,
                                                  ("negative", "positive"), {"1": "b", "0": "a"}])


def test_converted_configs():
    names = ["neg", "pos"]
    check("classification", tasks.get("classification").converted_config(128, 2, names),
          {"task": "classification", "max_seq_len": 128, "num_labels": 2, "label_names": names})
    check("regression", tasks.get("regression").converted_config(128), {"task": "regression", "max_seq_len": 128})
    check("race", tasks.get("race").converted_config(512, 1, ["LABEL_0"]), {"task": "race", "max_seq_len": 512})
    check("multi-label", tasks.get("multi-label").converted_config(64, 2, names),
          {"task": "multi-label", "max_seq_len": 64, "num_labels": 2, "label_names": names, "thresholds": [0.5, 0.5]})
    check("token-classification", tasks.get("token-classification").converted_config(64, 2, names),
          {"task": "token-classification", "max_seq_len": 64, "num_labels": 2, "label_names": names})
