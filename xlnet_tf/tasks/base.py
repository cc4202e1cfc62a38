"""What every task has: `Task`, the base of the fine-tuning tasks, and `ExportTask`, what an export of any task
(a language model's too) needs; `TaskData` (a file read for a task), `ReadOptions` (how to read it) and
`TaskOptions` (FinetuneSetup fields that only some tasks take).

The task modules are cheap to import (no numpy, TensorFlow or Keras): the CLI lists the tasks for `--task`.
What they compute with is imported inside the methods that use it."""

from __future__ import annotations

import dataclasses
import json

from xlnet_tf import files
from xlnet_tf.config import ConfigError

ENCODER_INPUTS = ("input_ids", "segment_ids", "padding_mask")
# The fewest pieces of text a fine-tuning row of a text task is useful with: a --max-seq-len that leaves fewer
# beside the row's special tokens is refused (`Task.min_text_pieces`, `tasks.check_setup`).
MIN_TEXT_PIECES = 8
# An export reads a SQuAD context, or a token-classification text, up to this many times max_seq_len pieces: it
# reads every window of them, so the length of the text alone would bound what one request costs.
WINDOWED_LENGTHS = 32
# Texts of the requests written to an export's assets.extra/tf_serving_warmup_requests (serving_default only).
WARMUP_TEXTS = (
    "XLNet is a generalized autoregressive pretraining method.",
    "Le café « Zoë » sert une crème brûlée.",
    "",
)


@dataclasses.dataclass
class TaskData:
    """Examples of one file, their features (numpy, one row per model example, padded to max_seq_len, with
    `length`) and the reader's report."""

    examples: list
    features: dict
    report: dict
    raw: object = None  # the parsed SQuAD JSON, for the official evaluation


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """How a file is read into `TaskData`; each task reads the fields it knows (see `Task.read`)."""

    label_list: list | None = None
    label_values: list | None = None  # --label-names: the file values of label_list's names, read as those names
    is_training: bool = False
    doc_stride: int = 128
    max_query_len: int = 64
    max_doc_len: int | None = None
    tag_column: int = -1
    label_all_pieces: bool = False
    labeled: bool = True
    label_separator: str = ","
    columns: dict | None = None
    skip_bad_rows: bool = False
    id_column: str | int | None = None


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """FinetuneSetup fields that only the tasks taking them read: `defaults` {field: its default}, set by the
    command line's `flags`; another task refuses them when any differs from its default."""

    flags: tuple
    defaults: dict

    def given(self, setup):
        return any(getattr(setup, name) != default for name, default in self.defaults.items())


def aligned_predictions(report, predictions):
    """predict's output lines: one per input row (`report["rows"]`, `readers.InputRow`s in file order) with its
    "row" (from 0), "line" (where it starts in the file, from 1), "id" (when the file has an id column; null:
    unreadable) and its prediction's keys, or for a skipped row "error" (why). Without rows: `predictions`."""
    rows = report.get("rows")
    if rows is None:
        return predictions
    if sum(row.error is None for row in rows) != len(predictions):
        raise RuntimeError(f"{len(predictions)} predictions for {sum(row.error is None for row in rows)} rows read")
    answers, out = iter(predictions), []
    for number, row in enumerate(rows):
        where = {"row": number, **({} if row.line is None else {"line": row.line}),
                 **({} if report.get("id_column") is None else {"id": row.id})}
        out.append({**where, **(next(answers) if row.error is None else {"error": row.error})})
    return out


def softmax(logits):
    """Probabilities over the last axis of numpy logits."""
    import numpy as np

    probs = np.exp(logits - logits.max(-1, keepdims=True))
    return probs / probs.sum(-1, keepdims=True)


class ExportTask:
    """What an export needs of its task: the name recorded in xlnet_export.json, whether merged requests' rows
    are packed (`packs`), its signatures on tf.Examples ({signature: TensorFlow Serving method}), the shortest
    max_seq_len and the warm-up requests of serving_default."""

    name = None
    packs = False
    example_methods = {}

    def min_seq_len(self, finetune_config):
        """The shortest --max-seq-len an export of this task takes (A <sep> <cls>)."""
        return 3

    def warmup_inputs(self, finetune_config):
        """serving_default inputs (name -> list / nested list of str) for a few realistic requests."""
        return [{"text": [t]} for t in WARMUP_TEXTS] + [{"text": list(WARMUP_TEXTS)}]

    def text_pieces(self, finetune_config, length, doc_len, width):
        """{text input: (pieces, "first" or "last")}: the most pieces the export's signatures keep of each text input,
        from its start or from its end; each input is cut to the bytes those pieces come from before it is tokenized
        (`tasks.graphs.cut_text`). `length` is max_seq_len (the segment length of long documents), `doc_len`
        max_doc_len (None: one window), `width` the widest row. Every export has `tokenize(text)` (its first `width`
        pieces) and `encode` on the sentence inputs (fewer)."""
        return {"text": (width, "first")}


class Task(ExportTask):
    """One fine-tuning task: its model inputs and labels, how rows are laid out, how a file is read, what
    finetune_config.json records, its head model and loss, its predictions and metrics, and its export.

    Attributes:
      inputs / labels: the model's input features and the labels training adds (TaskData.features keys).
      left_padded: rows are padded on the left (<cls> last), else on the right.
      per_example_labels: labels of rank 2 that are not per position (never cropped to a stratum's width).
      position_outputs: outputs with one value per position (put back at their positions by `run_model`).
      packs: several examples may share a row (`data.packing`) when it reads one window.
      windows: how the task reads inputs longer than max_seq_len instead ("SQuAD reads long contexts" as
        --doc-stride windows); None: long documents are read with memory (--long-doc memory).
      named_labels: finetune_config records `num_labels` and `label_names`.
      options: the TaskOptions this task takes (other tasks refuse them).
      reads_ids: predict's --id-column names its input's id column (`ReadOptions.id_column`).
      min_text_pieces: the fewest pieces of text a row must hold for fine-tuning (0: not checked).
    """

    inputs = ENCODER_INPUTS
    labels = ("label_ids",)
    left_padded = True
    per_example_labels = ()
    position_outputs = ()
    windows = None
    named_labels = False
    options = ()
    reads_ids = False
    min_text_pieces = 0

    def default_doc_stride(self, max_seq_len):
        """The window stride when none is given (SQuAD's 128 context tokens)."""
        return 128

    def check_setup(self, setup):
        """Refuses a FinetuneSetup this task cannot run (UserError naming the flags)."""

    def check_files(self, setup):
        """Refuses, from what is cheap to read (a header line), a FinetuneSetup's train_file or eval_file this task
        cannot learn or evaluate from (UserError naming the file and the flag): before the run loads anything."""

    def rows_per_example(self, features):
        """Model rows per example (RACE: one per option)."""
        return 1

    def read(self, path, tokenizer, max_seq_len, options):
        """`path` read with `options` (ReadOptions) into TaskData: rows of max_seq_len (or of long documents)."""
        raise NotImplementedError

    def recorded(self, setup, train):
        """What finetune_config.json records for this task besides the common keys (`train`: the TaskData)."""
        if not self.named_labels:
            return {}
        labels = [str(label) for label in train.report["label_list"]]
        if setup.label_names is None:
            return {"num_labels": len(labels), "label_names": labels}
        from xlnet_tf.data.labels import name_labels

        # --label-names: the names, and the file's values (evaluate reads a file of either)
        return {"num_labels": len(labels), "label_names": name_labels(labels, setup.label_names, setup.train_file),
                "label_values": labels}

    def converted_config(self, max_seq_len, num_labels=None, label_names=None):
        """The finetune_config of a converted checkpoint's head of this task."""
        config = {"task": self.name, "max_seq_len": max_seq_len}
        if self.named_labels:
            config.update(num_labels=num_labels, label_names=label_names)
        return config

    def build_model(self, config, run_options=None, dtype=None, **head):
        """The head model (keras.Model) of this task; `head`: `heads.head_arguments` and, for long documents,
        segment_len, mem_len and grad_segments."""
        from xlnet_tf.heads import DOCUMENT_KWARGS

        document = {k: head[k] for k in DOCUMENT_KWARGS if k in head} if head.get("segment_len") else {}
        if document and self.windows:
            raise ConfigError("long documents with memory (segment_len) are for classification, regression and race")
        return self.head_model(config, run_options, dtype, document, head)

    def head_model(self, config, run_options, dtype, document, head):
        """`build_model`'s model: `document` the long-document keywords (empty for one window)."""
        raise NotImplementedError

    def loss(self, finetune_config):
        """outputs, batch -> (sum of the examples' losses, number of examples), per replica."""
        raise NotImplementedError

    def predictions(self, data, outputs, finetune_config):
        """One JSON-ready dict per example (what `xlnet-tf predict` writes), from the model's numpy outputs."""
        raise NotImplementedError

    def evaluate(self, data, outputs, finetune_config):
        """The task's metrics (dict) of labelled `data` from the model's outputs."""
        raise NotImplementedError

    def write_predictions(self, path, data, outputs, finetune_config):
        """Writes `xlnet-tf predict`'s output (JSONL, one line per input row: `aligned_predictions`); returns the
        number of predictions."""
        rows = self.predictions(data, outputs, finetune_config)
        lines = aligned_predictions(data.report, rows)
        files.write_text(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        return len(rows)

    def tunes(self, setup):
        """Whether fine-tuning tunes settings on the eval file after training (`tune`)."""
        return False

    def tune(self, data, outputs, source):
        """finetune_config entries tuned on the labelled `data` (read from `source`) and the model's outputs;
        called when `tunes`."""
        raise NotImplementedError

    def text_inputs(self, finetune_config):
        """The text inputs of the export's `encode` signature."""
        return ("text",)

    def serving_signatures(self, graphs, finetune_config, pack):
        """{name: tf.function} of this task's export: `serving_default`, `predict_ids` and its own ones, built
        over `graphs` (`tasks.graphs.Graphs`); `pack`: merged requests' rows are packed before the model."""
        raise NotImplementedError
