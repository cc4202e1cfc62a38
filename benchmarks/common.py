"""What every benchmark runner shares: the case description, synthetic batches and the timer.

A runner measures one `Case` in its own process (see `worker.py`): it builds its model, then calls
`time_iterations` with a function that runs one step and returns only when the step's results are ready.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import numpy as np

from xlnet_tf.export.exporter import PRECISIONS as EXPORTER_PRECISIONS

STEP_TASKS = ("inference", "finetune", "pretrain")  # one synthetic batch, timed step by step
# The "lengths" group: sentence lengths of SST-2 (fine-tuning, predict, the export's latency); the "squad-lengths"
# group: fine-tuning on SQuAD 2.0's window lengths (a head reading every position), measured as the lengths rows.
LENGTH_TASKS = ("lengths-finetune", "lengths-predict", "lengths-latency", "lengths-squad")
# The "documents" group: documents read as segments with Transformer-XL memory (fine-tuning, the export's latency).
DOCUMENT_TASKS = ("documents-finetune", "documents-latency")
DOCUMENT_SEGMENTS = (1, 2, 4, 8)  # segments of seq_len per document
# The "documents-finetune" training modes: (--grad-segments, --recompute), 0 = all segments; the first is the
# default of `finetune --long-doc memory` (the growth table's), the third the reference of the training table.
DOCUMENT_TRAINING = ((0, "none"), (0, "blocks"), (1, "none"), (1, "blocks"))
# The "memory" group: peak memory and step time of training steps with each --recompute mode.
MEMORY_TASKS = ("memory-pretrain", "memory-finetune")
# The tasks measured with a --recompute mode and for their peak memory (each case in its own process).
PEAK_MEMORY_TASKS = MEMORY_TASKS + ("documents-finetune",)
# The "serving" group: `xlnet-tf serve` with batching against serving_default in process (benchmarks/serving.py).
SERVING_TASKS = ("serving-throughput",)
# The "precision" group: the export's latency and logits in each `export --precision` (benchmarks/run_precision.py).
PRECISION_TASKS = ("precision-latency",)
# The "generate" group: greedy generation from one prompt, ours against transformers' (benchmarks/run_generate.py).
GENERATE_TASKS = ("generate",)
DEFAULT_TASKS = STEP_TASKS + ("lengths",)  # a run without --tasks
TASKS = DEFAULT_TASKS + ("squad-lengths", "documents", "memory", "serving", "precision", "generate")  # --tasks
PRECISIONS = ("float32", "bfloat16")  # of xlnet-tf's step cases (--precisions)
# How transformers computes in bfloat16 (Case.precision_mode): "weights", its parameters and float inputs cast to
# bfloat16; "autocast", float32 parameters under torch.autocast. Ours: "" (Keras' mixed_bfloat16 policy).
TORCH_BFLOAT16_MODES = ("weights", "autocast")
EXPORT_PRECISIONS = tuple(EXPORTER_PRECISIONS)  # of the "precision" group's exports (--export-precisions)
# The implementations: xlnet-tf's own (in process, and its SavedModel export), then the references it is held to.
OURS = ("xlnet-tf", "xlnet-tf-savedmodel")
REFERENCES = ("keras-hub", "model-garden", "transformers")
IMPLEMENTATIONS = OURS + REFERENCES  # --implementations

# XLNet-base; the published sizes besides it are in xlnet_tf.config.MODEL_SIZES.
BASE_SIZE = {"n_token": 32000, "d_model": 768, "n_layer": 12, "n_head": 12, "d_head": 64, "d_inner": 3072}
# {tokens: sentences} of GLUE SST-2 train and dev (SentencePiece pieces, no special tokens); the data is not here.
LENGTHS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sst2_token_lengths.json")
# {tokens: windows} of SQuAD 2.0 dev windows at XLNet's SQuAD settings (special tokens included); the data is not here.
SQUAD_LENGTHS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "squad2_window_lengths.json")
SPECIAL_TOKENS = 2  # <sep> and <cls> of a single-sentence classification row


class ReferenceMissing(RuntimeError):
    """A reference implementation is not installed; the report shows it as missing, never as a zero."""


class Unsupported(ValueError):
    """The implementation cannot run this case (task, precision or XLA mode); reported as unsupported."""


@dataclasses.dataclass(frozen=True)
class Case:
    """One measurement.

    implementation: "xlnet-tf", "xlnet-tf-savedmodel", "keras-hub", "model-garden" or "transformers".
    task: "inference" (encoder forward), "finetune" (classification step: forward, backward, AdamW) or
    "pretrain" (two-stream permutation-LM step with the tied LM head, 1 / span_ratio of the tokens predicted),
    or one of LENGTH_TASKS on `sample_size` examples of SST-2 lengths (`length_examples`, seq_len =
    max_seq_len): "lengths-finetune" (examples/s of fine-tuning steps, data pipeline included; warmup: untimed
    steps, iterations: timed steps), "lengths-predict" (examples/s of predicting the sample; after one
    untimed pass, iterations: timed passes over it) and "lengths-latency" (the exported classifier's latency
    for a short and a long text; warmup and iterations count requests), and "lengths-squad" (as
    "lengths-finetune" on rows of SQuAD 2.0's window lengths, SQUAD_LENGTHS_FILE, with a head reading
    every position, as SQuAD's does),
    or one of DOCUMENT_TASKS on documents of S segments of seq_len tokens, S in `segments`:
    "documents-finetune" (examples/s and peak memory of a classification step on rows of S * seq_len real
    tokens read with memory, the gradient through the memory of the last `grad_segments` segments (0: all) and
    `recompute`; one S per case) and "documents-latency" (one export reading documents of up to
    max(segments) * seq_len tokens, its latency on one text of about S * seq_len tokens for each S; warmup
    and iterations count requests per S),
    or one of MEMORY_TASKS: "memory-pretrain" / "memory-finetune", a "pretrain" / "finetune" step with
    `recompute` ("none", "blocks" or "attention"), measured for its peak memory and step time,
    or one of SERVING_TASKS: "serving-throughput", the export served with batching (max_batch_size and the
    in-process batch: batch_size; max_seq_len: seq_len) against it in process, with `serving`'s parameters
    (serving.PARAMETERS' keys: client counts, seconds, texts, overload factor, ...),
    or one of GENERATE_TASKS: "generate", greedy generation of `new_tokens` tokens after one prompt of seq_len
    tokens (batch_size 1; warmup and iterations count generations),
    or one of PRECISION_TASKS: "precision-latency", the random classifier exported with `export --precision
    precision` (float32, bfloat16 or float16: EXPORT_PRECISIONS), its latency on one text of seq_len - 2
    pieces (warmup and iterations count requests) and on a batch of batch_size texts (1 untimed, then
    `batch_requests` timed requests), in process and served, and its logits on that batch.
    precision_mode: how a reference computes in `precision` where it has several ways (TORCH_BFLOAT16_MODES for
    transformers in bfloat16); "" otherwise.
    size: the architecture (BASE_SIZE keys). Dropout 0.1 when training, no memory (mem_len 0) but within a
    document.
    padding (LENGTH_TASKS only): "buckets" (xlnet-tf's padding by length: length strata when fine-tuning,
    buckets when predicting), "packed" (xlnet-tf's packed rows, `data.packing`), "fixed" (every row padded to
    seq_len) or "dynamic" (each batch padded to its longest row).
    """

    implementation: str
    task: str
    batch_size: int = 8
    seq_len: int = 128
    precision: str = "float32"
    xla: bool = False
    size: tuple = tuple(sorted(BASE_SIZE.items()))
    span_ratio: int = 6
    warmup: int = 2
    iterations: int = 5
    padding: str = ""
    sample_size: int = 0
    segments: tuple = ()
    recompute: str = ""
    grad_segments: int = 1
    new_tokens: int = 0
    serving: tuple = ()
    batch_requests: int = 0
    precision_mode: str = ""

    @property
    def dims(self):
        return dict(self.size)

    @property
    def num_predict(self):
        """Targets per sequence of a pretraining step (K = span_ratio: 1 / K of the tokens)."""
        return max(1, self.seq_len // self.span_ratio)

    @property
    def step_task(self):
        """The step a MEMORY_TASKS case times ("pretrain" or "finetune"); other cases: their task."""
        return {"memory-pretrain": "pretrain", "memory-finetune": "finetune"}.get(self.task, self.task)

    @property
    def tokens(self):
        return self.batch_size * self.seq_len

    def to_dict(self):
        """The fields; `padding` and `sample_size` only for LENGTH_TASKS, `segments` only for DOCUMENT_TASKS,
        `recompute` only for MEMORY_TASKS and "documents-finetune", `grad_segments` only for
        "documents-finetune", `serving` (a dict) only for SERVING_TASKS, `batch_requests` only for
        PRECISION_TASKS, `precision_mode` only where set (the other cases' JSON is unchanged)."""
        values = dataclasses.asdict(self)
        if self.task not in LENGTH_TASKS:
            del values["padding"], values["sample_size"]
        if self.task in DOCUMENT_TASKS:
            values["segments"] = list(self.segments)
        else:
            del values["segments"]
        if self.task not in PEAK_MEMORY_TASKS:
            del values["recompute"]
        if self.task != "documents-finetune":
            del values["grad_segments"]
        if self.task not in GENERATE_TASKS:
            del values["new_tokens"]
        if self.task in SERVING_TASKS:
            values["serving"] = dict(self.serving)
        else:
            del values["serving"]
        if self.task not in PRECISION_TASKS:
            del values["batch_requests"]
        if not self.precision_mode:
            del values["precision_mode"]
        return values

    @classmethod
    def from_dict(cls, values):
        values = dict(values)
        if "size" in values:
            values["size"] = tuple(sorted(tuple(item) for item in (
                values["size"].items() if isinstance(values["size"], dict) else values["size"])))
        if "segments" in values:
            values["segments"] = tuple(values["segments"])
        if "serving" in values:
            items = values["serving"].items() if isinstance(values["serving"], dict) else values["serving"]
            values["serving"] = tuple(sorted((key, tuple(value) if isinstance(value, list) else value)
                                             for key, value in items))
        return cls(**values)

    def label(self):
        mode = f"{precision_text(self.precision, self.precision_mode)}{' xla' if self.xla else ''}"
        padding = f" {self.padding}" if self.padding else ""
        segments = f" S={','.join(map(str, self.segments))}" if self.segments else ""
        recompute = f" recompute={self.recompute}" if self.recompute else ""
        if self.task == "documents-finetune":
            recompute = f" K={self.grad_segments or 'all'}{recompute}"
        if self.task in GENERATE_TASKS:
            recompute = f" +{self.new_tokens}"
        clients = dict(self.serving).get("clients")
        serving = f" clients={','.join(map(str, clients))}" if clients else ""
        return f"{self.implementation} {self.task}{padding}{segments}{recompute}{serving} T={self.seq_len} {mode}"


def precision_text(precision, mode=""):
    """A precision with its mode (`Case.precision_mode`), as the labels and the report show it: "float32",
    "bfloat16" (ours: mixed_bfloat16), "bfloat16 weights", "bfloat16 autocast"."""
    return f"{precision} {mode}".strip()


def keras_dtype(case: Case):
    """The Keras dtype policy of a case of ours or keras-hub's: "mixed_bfloat16" for bfloat16, else "float32"."""
    return "mixed_bfloat16" if case.precision == "bfloat16" else "float32"


def synthetic_batch(case: Case, seed: int = 0):
    """Numpy inputs for `case`, identical for every implementation.

    input_ids, segment_ids (two segments), padding_mask [B, T] int32 with 1 = real token (every other row
    has its last quarter padded); label_ids [B]; for "pretrain" also perm_mask [B, T, T]
    float32 (1 = i may NOT attend to j), target_mapping [B, P, T] float32 (one-hot), target_ids [B, P] and
    target_mask [B, P], from a random factorization order in which non-targets come first, as XLNet's.
    """
    rng = np.random.default_rng(seed)
    batch, length = case.batch_size, case.seq_len
    n_token = case.dims["n_token"]
    input_ids = rng.integers(10, n_token, size=(batch, length), dtype=np.int32)
    segment_ids = np.zeros((batch, length), np.int32)
    segment_ids[:, length // 2:] = 1
    padding_mask = np.ones((batch, length), np.int32)
    padding_mask[1::2, length - length // 4:] = 0
    features = {
        "input_ids": input_ids,
        "segment_ids": segment_ids,
        "padding_mask": padding_mask,
        "label_ids": rng.integers(0, 2, size=(batch,), dtype=np.int32),
    }
    if case.step_task == "pretrain":
        predict = case.num_predict
        perm_mask = np.zeros((batch, length, length), np.float32)
        target_mapping = np.zeros((batch, predict, length), np.float32)
        target_ids = np.zeros((batch, predict), np.int32)
        for row in range(batch):
            real = int(padding_mask[row].sum())
            targets = rng.choice(real, size=predict, replace=False)
            rank = np.full(length, -1)
            rank[targets] = rng.permutation(predict)  # the order in which targets are predicted
            is_target = rank >= 0
            # i may not see a target j predicted at or after i (non-targets have rank -1: they see no target).
            perm_mask[row] = is_target[None, :] & (rank[None, :] >= rank[:, None])
            order = np.sort(targets)
            target_mapping[row, np.arange(predict), order] = 1.0
            target_ids[row] = input_ids[row, order]
        features.update(perm_mask=perm_mask, target_mapping=target_mapping, target_ids=target_ids,
                        target_mask=np.ones((batch, predict), np.float32))
    return features


def length_histogram(split="train", path=LENGTHS_FILE):
    """SST-2 sentence lengths of `split` ("train" or "dev") -> (tokens int64 [K] ascending, sentences int64 [K]):
    `sentences[k]` sentences have `tokens[k]` pieces (no special tokens); of SQUAD_LENGTHS_FILE: `split`
    "windows", each window's pieces with its special tokens."""
    with open(path, encoding="utf-8") as handle:
        table = json.load(handle)[split]
    tokens = np.array(sorted(int(key) for key in table), np.int64)
    return tokens, np.array([table[str(t)] for t in tokens], np.int64)


def sample_lengths(count, max_seq_len, seed=0, split="train", path=LENGTHS_FILE, special_tokens=SPECIAL_TOKENS):
    """`count` classification row lengths, int64 [count]: sentence lengths drawn with replacement from the
    histogram (seeded), plus the `special_tokens`, capped at `max_seq_len` (longer sentences are truncated).
    SQuAD 2.0's windows: `split` "windows", `path` SQUAD_LENGTHS_FILE, `special_tokens` 0 (counted there)."""
    tokens, sentences = length_histogram(split, path)
    drawn = np.random.default_rng(seed).choice(tokens, size=count, p=sentences / sentences.sum())
    return np.minimum(drawn + special_tokens, max_seq_len)


def length_examples(case: Case, seed=0):
    """The examples of a LENGTH_TASKS case, identical for every implementation: `case.sample_size` sentences
    of random token ids in [10, n_token) whose rows (`sample_lengths` at case.seq_len: SST-2's sentences, or
    SQuAD 2.0's windows for "lengths-squad") hold the sentence and the special tokens -> (list of int32 [n_i]
    arrays, without special tokens; int32 [N] labels in {0, 1})."""
    squad = {"split": "windows", "path": SQUAD_LENGTHS_FILE, "special_tokens": 0} if case.task == "lengths-squad" else {}
    lengths = sample_lengths(case.sample_size, case.seq_len, seed, **squad) - SPECIAL_TOKENS
    rng = np.random.default_rng([seed, 1])
    ids = rng.integers(10, case.dims["n_token"], size=int(lengths.sum()), dtype=np.int32)
    labels = rng.integers(0, 2, size=len(lengths), dtype=np.int32)
    return np.split(ids, np.cumsum(lengths)[:-1]), labels


def memory_length(segments, seq_len):
    """Memory positions per layer that hold every earlier segment of a document of `segments` segments (at
    least one segment's: a one-segment document reads no memory, but a model reading documents needs one)."""
    return max(segments - 1, 1) * seq_len


def time_iterations(step, warmup, iterations):
    """Runs `step()` warmup times untimed, then `iterations` times; returns the seconds of each timed run."""
    for _ in range(warmup):
        step()
    seconds = []
    for _ in range(iterations):
        began = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - began)
    return seconds


def time_case(case: Case, inference_step, make_train_step, inference_note, train_note):
    """A reference runner's result: for "inference", `inference_step()` (a callable to time) is timed; for a
    training task, `make_train_step(losses)` builds a step that appends each step's loss to `losses`.
    Returns {"seconds", "note"} (+ "loss_first", "loss_last" when training)."""
    if case.task == "inference":
        return {"seconds": time_iterations(inference_step(), case.warmup, case.iterations), "note": inference_note}
    losses = []
    seconds = time_iterations(make_train_step(losses), case.warmup, case.iterations)
    return {"seconds": seconds, "note": train_note, "loss_first": losses[0], "loss_last": losses[-1]}


def require_split_heads(case: Case, who):
    """Raises Unsupported unless d_head * n_head == d_model, which `who` (a reference's config) assumes."""
    dims = case.dims
    if dims["d_head"] * dims["n_head"] != dims["d_model"]:
        raise Unsupported(f"{who} fixes d_head = d_model // n_head; "
                         f"got d_head={dims['d_head']} for d_model={dims['d_model']}, n_head={dims['n_head']}")
