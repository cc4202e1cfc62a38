"""Fine-tuning, evaluation and prediction for classification, regression, SQuAD, RACE and token classification,
on the same training loop as pretraining. A fine-tuned model directory records the task, label names, max_seq_len, the tokenizer
and the architecture (finetune_config.json, xlnet_config.json, spiece.model), so export needs nothing else."""

from __future__ import annotations

import dataclasses
import functools
import logging
import math

import numpy as np

from xlnet_tf import files, tasks
from xlnet_tf.config import RunOptions, XLNetConfig
from xlnet_tf.errors import UserError
from xlnet_tf.hardware import precision_policy
from xlnet_tf.tasks.base import ReadOptions, TaskData  # noqa: F401 (TaskData: importable from here, as before)
from xlnet_tf.tasks.multi_label import multi_label_decisions  # noqa: F401 (moved; importable from here, as before)
from xlnet_tf.tasks.squad import squad_predictions  # noqa: F401 (moved; importable from here, as before)
from xlnet_tf.tasks.token_classification import token_predictions  # noqa: F401 (moved; importable from here)
from xlnet_tf.training.evaluation import EvalSchedule

log = logging.getLogger(__name__)
EVAL_FILE = "eval_results.json"
# By task name (`tasks.Task`): model inputs, labels (added in training), whether rows are left-padded.
INPUTS = {name: tasks.get(name).inputs for name in tasks.TASK_NAMES}
LABELS = {name: tasks.get(name).labels for name in tasks.TASK_NAMES}
LEFT_PADDED = {name: tasks.get(name).left_padded for name in tasks.TASK_NAMES}


@dataclasses.dataclass(frozen=True)
class FinetuneSetup:
    """What `xlnet-tf finetune` needs besides the training options.

    bucket_boundaries: how batches are padded by length (`xlnet_tf.data.buckets.stratify`): "auto" (length
    strata chosen from the training file, the model's size and the run's steps), "none" (every row padded to
    max_seq_len) or ascending widths "L1,L2,...".
    long_doc: "truncate" (one window of max_seq_len, the original's) or "memory" (classification, regression,
    RACE: texts of up to `max_doc_len` tokens read as segments of max_seq_len, each attending to the memory
    of the ones before it: `mem_len` positions per layer, 0 = all of them; memory keeps its gradient for the
    last `grad_segments` segments, 0 = all of them, the default).
    doc_stride: SQuAD: context tokens between windows (default 128); token-classification: pieces between the
    starts of a long sentence's windows (default (max_seq_len - 2) // 2).
    tag_column, label_all_pieces: token-classification: the tag's column in CoNLL files (-1: the last) and
    whether every piece of a word carries its tag in the loss (default: its first piece only).
    squad_head: SQuAD: "beam" (the original's: end conditioned on the start, answerability head) or "simple"
    (transformers' XLNetForQuestionAnsweringSimple: start / end logits from one dense layer, spans scored by
    start + end logit, the null answer by the <cls> score); max_answer_length: pieces of a predicted answer.
    label_separator, tune_thresholds: multi-label: what separates a TSV / CSV field's labels, and whether each
    label's threshold is tuned on eval_file for the best F1 (default 0.5 each); thresholds are recorded.
    packing: "auto" (classification, regression, multi-label and RACE in one window: a step's examples packed
    into rows of a fixed width, `data.packing`, when a packed step's one model call computes at most the
    positions of the length strata's calls plus their other calls' one-time cost, `packing.pays`; the width is
    recorded and evaluate / predict pack too) or "none" (length strata only).
    columns: classification, regression, multi-label: {"text_a" / "text_b" / "label": a TSV / CSV header name or
    JSONL key, or a column number} (`readers.read_examples`' arguments); recorded for evaluate and predict.
    skip_bad_rows: skip and count the bad rows (questions, sentences) of train_file and eval_file.
    label_names: classification, multi-label: names for train_file's label values (`labels.parse_label_names`:
    "NAME,NAME,..." in the values' id order, or "VALUE=NAME,..."); recorded as label_names, the values as
    label_values.
    evaluation: evaluation during training (`evaluation.EvalSchedule`: --eval-every, --best-metric,
    --early-stopping-patience); off by default.
    The options of one task (tag_column, label_separator, squad_head, columns, ...) are refused for another
    (`tasks.check_setup`).
    """

    task: str
    train_file: str
    model_dir: str
    config: XLNetConfig
    run_options: RunOptions
    spm_model: str
    lower_case: bool = False
    eval_file: str | None = None
    init_checkpoint: str | None = None
    max_seq_len: int = 128
    doc_stride: int | None = None
    max_query_len: int = 64
    epochs: float | None = None
    mixed_precision: str | None = None
    bucket_boundaries: str = "auto"
    long_doc: str = "truncate"
    max_doc_len: int | None = None
    mem_len: int = 0
    grad_segments: int = 0
    tag_column: int = -1
    label_all_pieces: bool = False
    squad_head: str = "beam"
    max_answer_length: int = 64
    label_separator: str = ","
    tune_thresholds: bool = False
    packing: str = "auto"
    columns: dict | None = None
    skip_bad_rows: bool = False
    label_names: object = None
    evaluation: EvalSchedule = EvalSchedule()

    def __post_init__(self):
        from xlnet_tf.data.labels import parse_label_names
        from xlnet_tf.data.packing import parse_mode

        object.__setattr__(self, "columns", self.columns or None)
        tasks.check_setup(self)
        if self.label_names is not None:
            object.__setattr__(self, "label_names", parse_label_names(self.label_names))
        self.evaluation.check(self.task, self.eval_file)
        if self.doc_stride is not None and self.doc_stride < 1:
            raise UserError(f"--doc-stride must be at least 1, got {self.doc_stride}")
        object.__setattr__(self, "packing", parse_mode(self.packing))
        if self.long_doc not in LONG_DOC_MODES:
            raise UserError(f"--long-doc must be one of {', '.join(LONG_DOC_MODES)}, got {self.long_doc!r}")
        if self.long_doc == "truncate":
            if self.max_doc_len or self.mem_len or self.grad_segments:
                raise UserError("--max-doc-len, --mem-len and --grad-segments need --long-doc memory")
            return
        windows = tasks.get(self.task).windows
        if windows:
            raise UserError(f"--long-doc memory is for classification, regression and race; {windows} as --doc-stride "
                            "windows")
        if self.max_doc_len is None or self.max_doc_len < self.max_seq_len:
            raise UserError(f"--long-doc memory needs --max-doc-len of at least --max-seq-len ({self.max_seq_len}), "
                            f"got {self.max_doc_len}")
        if self.mem_len < 0:
            raise UserError(f"--mem-len must be >= 0, got {self.mem_len}")
        if self.grad_segments < 0:
            raise UserError(f"--grad-segments must be 'all' or at least 1, got {self.grad_segments}")

    @property
    def stride(self):
        """doc_stride, or the task's default."""
        if self.doc_stride is not None:
            return self.doc_stride
        return tasks.get(self.task).default_doc_stride(self.max_seq_len)

    @property
    def doc_len(self):
        """The documents' token budget: max_doc_len with memory, else None (one window)."""
        return self.max_doc_len if self.long_doc == "memory" else None


LONG_DOC_MODES = ("truncate", "memory")


def config_doc_len(finetune_config):
    """The token budget of documents a fine-tuned directory reads with memory, or None (one window)."""
    return finetune_config["max_doc_len"] if finetune_config.get("long_doc") == "memory" else None


def load_task_data(task, path, tokenizer, max_seq_len, label_list=None, is_training=False, doc_stride=128,
                   max_query_len=64, max_doc_len=None, tag_column=-1, label_all_pieces=False, labeled=True,
                   label_separator=",", columns=None, skip_bad_rows=False, label_values=None, id_column=None):
    """Reads `path` for the task named `task` (`Task.read`) into `tasks.base.TaskData`: long documents of up to
    `max_doc_len` tokens in segments of max_seq_len for classification, regression and race. Token
    classification: `tag_column` of CoNLL files, `label_all_pieces`; `labeled=False` reads only the words
    (prediction input; a file's tags, if any, are not read). Multi-label: `label_separator`. `columns`:
    `FinetuneSetup.columns` (`labeled=False`: its label column is not read); `skip_bad_rows`: as the readers'.
    `label_values`: the file values of `label_list`'s names (--label-names), read as those names."""
    options = ReadOptions(label_list=label_list, label_values=label_values, is_training=is_training,
                          doc_stride=doc_stride, max_query_len=max_query_len, max_doc_len=max_doc_len,
                          tag_column=tag_column, label_all_pieces=label_all_pieces, labeled=labeled,
                          label_separator=label_separator, columns=columns, skip_bad_rows=skip_bad_rows,
                          id_column=id_column)  # id_column: the input's ids (predict), as the readers'
    return tasks.get(task).read(path, tokenizer, max_seq_len, options)


def parse_widths(spec, max_seq_len, max_doc_len=None):
    """`--bucket-boundaries` for one window (`buckets.parse_boundaries`) or, for long documents, widths that
    are whole segments (multiples of max_seq_len)."""
    from xlnet_tf.data import buckets
    from xlnet_tf.data.graph_features import document_width

    width = document_width(max_seq_len, max_doc_len)
    widths = buckets.parse_boundaries(spec, width)
    if max_doc_len is not None and isinstance(widths, tuple) and any(w % max_seq_len for w in widths):
        raise UserError(f"--bucket-boundaries with --long-doc memory must be multiples of --max-seq-len "
                        f"({max_seq_len}), got {spec!r}")
    return widths


def crop(batch, width, left_padded, fixed=()):
    """Per-position features (rank >= 2: [..., L]) of a batch cut to their last (left-padded rows) or first
    (right-padded rows) `width` positions; the rest (and the keys in `fixed`, e.g. multi-label's [B, C]
    labels) unchanged. Works on numpy arrays and tensors."""
    return {k: (v[..., -width:] if left_padded else v[..., :width]) if len(v.shape) >= 2 and k not in fixed else v
            for k, v in batch.items()}


class TaskInput:
    """The training loop's input for fine-tuning: every batch is a tuple with one part per length stratum
    (`buckets.Strata`), the part's rows cropped to its stratum's width (a static shape per part: one traced
    program for every step); or, with `packed` (a `packing.PackedPlan`), one dict of packed rows holding the
    same examples (`packing.pack_rows`: one static shape, one model call per micro-batch).

    features: numpy rows padded to max_seq_len (`TaskData.features`); keys: the model inputs and labels;
    task: the task's name; plan: `buckets.training_plan`, for the strategy's number of replicas.
    """

    def __init__(self, features, keys, task, plan, packed=None):
        task = tasks.get(task)
        self.features = {k: features[k] for k in keys}
        self.left_padded = task.left_padded
        self.fixed = task.per_example_labels
        self.plan = plan
        self.packed = packed
        self.rows_per_example = task.rows_per_example(features)  # RACE: C option rows
        self._tables = None

    def dataset(self, input_context, start_step):
        """Per-replica batches (tuples of parts, or packed dicts) from step `start_step` on."""
        import tensorflow as tf

        from xlnet_tf.data import packing

        if self._tables is None:  # one host copy of the rows, shared by every pipeline's dataset
            with tf.device("/cpu:0"):
                self._tables = {k: tf.constant(v) for k, v in self.features.items()}
        tables, plan = self._tables, self.plan
        if input_context.num_replicas_in_sync != plan.replicas:
            raise ValueError(f"the plan is for {plan.replicas} replicas, the strategy has "
                             f"{input_context.num_replicas_in_sync}")
        local = plan.replicas // input_context.num_input_pipelines  # replicas this pipeline feeds
        first = input_context.input_pipeline_id * local
        begin = start_step * plan.accum

        def mine(array):  # [micro, replicas, n] -> this pipeline's per-replica shares from `begin` on
            return array[begin:, first:first + local].reshape(-1, array.shape[-1]).astype(np.int32)

        if self.packed is not None:
            packed = self.packed

            @tf.autograph.experimental.do_not_convert  # tf.data would convert it, and nothing needs it
            def pack(examples, row, offset, slot):
                batch = {k: tf.gather(table, examples) for k, table in tables.items()}
                return packing.pack_rows(batch, row, offset, slot, packed.shape)

            slices = (mine(packing.plan_examples(plan)), mine(packed.row), mine(packed.offset), mine(packed.slot))
            return tf.data.Dataset.from_tensor_slices(slices).map(pack).prefetch(tf.data.AUTOTUNE)
        parts = []
        for batches, count in zip(plan.batches, plan.strata.counts):
            parts.append(mine(batches.reshape(len(batches), plan.replicas, count)))

        @tf.autograph.experimental.do_not_convert
        def gather(*indices):
            return tuple(crop({k: tf.gather(table, rows) for k, table in tables.items()}, width, self.left_padded,
                              self.fixed) for rows, width in zip(indices, plan.strata.widths))

        dataset = tf.data.Dataset.from_tensor_slices(tuple(parts)).map(gather)
        return dataset.prefetch(tf.data.AUTOTUNE)

    def token_counts(self, first_step, end_step):
        """(real tokens, padded positions) of the global batches of steps [first_step, end_step)."""
        plan = self.plan
        micro = slice(first_step * plan.accum, end_step * plan.accum)
        real = sum(int(self.features["padding_mask"][batches[micro]].sum()) for batches in plan.batches)
        if self.packed is not None:
            return real, (end_step - first_step) * self.packed.positions_per_step(plan.accum, plan.replicas)
        padded = sum(batches[micro].size * width for batches, width in zip(plan.batches, plan.strata.widths))
        return real, padded * self.rows_per_example


def choose_packing(setup, features, plan, part_cost):
    """The `packing.PackedPlan` of a fine-tuning run, or None (length strata): `--packing auto` packs the
    tasks that pack (`Task.packs`) in one window when a packed micro-batch (one model call) computes at most the
    strata's positions plus `part_cost` for each of their other model calls (what one costs the run once, in
    positions: `buckets.part_positions`; it decides for small models and short runs)."""
    from xlnet_tf.data import packing

    if setup.packing == "none" or not tasks.get(setup.task).packs or setup.doc_len is not None:
        return None
    lengths = packing.sequence_lengths(features)
    packed = packing.packed_plan(plan, lengths, packing.choose_width(lengths, setup.max_seq_len))
    shape, strata = packed.shape, plan.strata
    strata_positions = strata.positions_per_row * sum(strata.counts) * (lengths.shape[1] if lengths.ndim == 2 else 1)
    chosen = packing.pays(shape, strata_positions, len(strata.widths), part_cost)
    log.info("packing: %d rows of %d (at most %d examples a row) per micro-batch, %d positions against the length "
             "strata's %.0f in %d model calls (each call after the first worth %.0f positions in this run): %s",
             shape.rows, shape.width, shape.slots, shape.rows * shape.width, strata_positions, len(strata.widths),
             part_cost, "packed" if chosen else "strata (packing does not pay)")
    return packed if chosen else None


def run_finetuning(setup: FinetuneSetup, options, strategy):
    """Fine-tunes, then evaluates on `eval_file` when given; returns (trainer, records, eval metrics)."""
    from xlnet_tf.data import buckets
    from xlnet_tf.data.graph_features import document_width
    from xlnet_tf.heads import FINETUNE_FILE, head_arguments, write_head_run_options
    from xlnet_tf.model import CONFIG_FILE, SPM_FILE
    from xlnet_tf.tokenization import XLNetTokenizer, read_tokenizer_settings, tokenizer_settings
    from xlnet_tf.training.loop import Trainer, TrainingOptions

    # the settings recorded beside the SentencePiece model (a converted directory's), --lower-case over them
    task = tasks.get(setup.task)
    task.check_files(setup)  # a file without labels is refused before the run (the eval file is read after it)
    recorded = read_tokenizer_settings(files.dirname(setup.spm_model))
    tokenizer = XLNetTokenizer(setup.spm_model, **tokenizer_settings(recorded, lower_case=setup.lower_case or None))
    train = load_task_data(setup.task, setup.train_file, tokenizer, setup.max_seq_len, is_training=True,
                           doc_stride=setup.stride, max_query_len=setup.max_query_len, max_doc_len=setup.doc_len,
                           tag_column=setup.tag_column, label_all_pieces=setup.label_all_pieces,
                           label_separator=setup.label_separator, columns=setup.columns,
                           skip_bad_rows=setup.skip_bad_rows)
    rows = len(train.features["input_ids"])
    if rows == 0:
        raise UserError(f"{setup.train_file}: no training examples")
    if setup.epochs:
        options = dataclasses.replace(options, train_steps=max(1, math.ceil(rows * setup.epochs / options.batch_size)))
    log.info("%s: %d training rows, %d steps of %d", setup.train_file, rows, options.train_steps, options.batch_size)
    finetune_config = {
        "task": setup.task, "max_seq_len": setup.max_seq_len, **tokenizer.settings,
        "spm_model": SPM_FILE, "doc_stride": setup.stride, "max_query_len": setup.max_query_len,
    }
    finetune_config.update(task.recorded(setup, train))
    width = document_width(setup.max_seq_len, setup.doc_len)
    finetune_config["long_doc"] = setup.long_doc
    if setup.long_doc == "memory":  # mem_len 0: everything before the last segment
        finetune_config.update(max_doc_len=setup.max_doc_len, mem_len=setup.mem_len or width - setup.max_seq_len,
                               grad_segments=setup.grad_segments)
    replicas = strategy.num_replicas_in_sync
    part_cost = buckets.part_positions(setup.config.d_model, setup.config.d_inner,
                                       options.train_steps * options.grad_accum_steps)
    stratified = functools.partial(buckets.stratify, train.features["length"], options.batch_size // replicas, width,
                                   parse_widths(setup.bucket_boundaries, setup.max_seq_len, setup.doc_len),
                                   multiple=setup.max_seq_len if setup.doc_len else buckets.PAD_MULTIPLE)
    strata = stratified(part_cost=part_cost)
    # evaluate / predict: the widths of the positions alone (inference traces the model once for every width)
    finetune_config["bucket_boundaries"] = sorted(set(stratified().widths) | {width})
    mean_length = float(np.mean(train.features["length"]))
    log.info("length strata: widths %s, rows per replica batch %s (padded positions per real token %.2f; %.2f "
             "at width %d)", list(strata.widths), list(strata.counts), strata.positions_per_row / mean_length,
             width / mean_length, width)
    plan = buckets.training_plan(strata, options.train_steps, options.grad_accum_steps, replicas, options.seed)
    packed = choose_packing(setup, train.features, plan, part_cost)
    finetune_config["packing"] = packed.shape.to_dict() if packed is not None else None  # evaluate / predict

    files.makedirs(setup.model_dir)
    setup.config.to_json(files.join(setup.model_dir, CONFIG_FILE))
    write_head_run_options(setup.model_dir, setup.run_options)  # clamp_len, ...: evaluate / predict / export use them
    files.write_json(files.join(setup.model_dir, FINETUNE_FILE), finetune_config)
    spm_copy = files.join(setup.model_dir, SPM_FILE)
    if files.absolute(setup.spm_model) != files.absolute(spm_copy):
        files.copy(setup.spm_model, spm_copy)

    dtype = precision_policy(setup.mixed_precision, strategy)
    head = head_arguments(finetune_config)
    head["grad_segments"] = setup.grad_segments

    def build_model():
        model = task.build_model(setup.config, setup.run_options, dtype=dtype, **head)
        if setup.init_checkpoint:
            model.load_encoder(setup.init_checkpoint)
        return model

    inputs = TaskInput(train.features, task.inputs + task.labels, setup.task, plan, packed)
    assert isinstance(options, TrainingOptions)
    hook = eval_data = None
    if setup.evaluation.enabled:  # the eval file is read once, scored at every evaluation
        from xlnet_tf.training.evaluation import DuringTraining

        eval_data = read_eval_data(finetune_config, setup.eval_file, tokenizer, skip_bad_rows=setup.skip_bad_rows)
        every = setup.evaluation.steps(rows, options.batch_size)

        def score(model):
            return evaluate_model(model, finetune_config, setup.eval_file, tokenizer, strategy=strategy, data=eval_data)

        hook = DuringTraining(setup.model_dir, setup.task, setup.evaluation, every, score, setup.config)
        log.info("evaluating %s every %d steps and at the last; the best by %s is kept in %s", setup.eval_file, every,
                 hook.metric, files.join(setup.model_dir, tasks.BEST_DIR))
    trainer = Trainer(strategy, build_model, task.loss(finetune_config), None, options, setup.model_dir, inputs=inputs,
                      hook=hook)
    if hook is not None and hook.exhausted:
        log.warning("%s: an earlier run stopped early (%s): nothing to do", setup.model_dir,
                    hook.state["stopped_early"]["why"] if "stopped_early" in hook.state else "patience")
        return trainer, [], None
    records = trainer.train()
    results = None
    if hook is not None and hook.state and not trainer.stopped_by_signal:
        results = _results_of_best(trainer, hook, task, setup, finetune_config, eval_data, tokenizer, strategy)
    elif setup.eval_file and not trainer.stopped_by_signal:
        if task.tunes(setup):  # multi-label's thresholds
            data, outputs = _infer(trainer.model, finetune_config, setup.eval_file, tokenizer, 32, strategy,
                                   skip_bad_rows=setup.skip_bad_rows)
            finetune_config.update(task.tune(data, outputs, setup.eval_file))
            files.write_json(files.join(setup.model_dir, FINETUNE_FILE), finetune_config)
        results = evaluate_model(trainer.model, finetune_config, setup.eval_file, tokenizer, strategy=strategy,
                                 skip_bad_rows=setup.skip_bad_rows)
        files.write_json(files.join(setup.model_dir, EVAL_FILE), results, sort_keys=False)
    return trainer, records, results


def _results_of_best(trainer, hook, task, setup, finetune_config, eval_data, tokenizer, strategy):
    """eval_results.json after evaluation during training (`DuringTraining.results`); a task that tunes (multi-label
    thresholds) tunes them on the best model, whose metrics then count them."""
    from xlnet_tf.heads import FINETUNE_FILE
    from xlnet_tf.model import CHECKPOINT_PREFIX

    results = hook.results()
    if task.tunes(setup):
        import tensorflow as tf

        kept = trainer.model.get_weights()  # the last; put back after
        status = tf.train.Checkpoint(model=trainer.model).read(files.join(setup.model_dir, tasks.BEST_DIR,
                                                                          CHECKPOINT_PREFIX))
        status.expect_partial()
        data, outputs = _infer(trainer.model, finetune_config, setup.eval_file, tokenizer, 32, strategy, data=eval_data)
        finetune_config.update(task.tune(data, outputs, setup.eval_file))
        files.write_json(files.join(setup.model_dir, FINETUNE_FILE), finetune_config)
        tuned = evaluate_model(trainer.model, finetune_config, setup.eval_file, tokenizer, strategy=strategy,
                               data=eval_data)
        trainer.model.set_weights(kept)
        results = {**tuned, **{k: results[k] for k in ("step", "checkpoint", "metric", "last")}}
    files.write_json(files.join(setup.model_dir, EVAL_FILE), results, sort_keys=False)
    return results


# -- inference ------------------------------------------------------------------------------------------------


def run_model(model, task, features, batch_size=32, boundaries=None, strategy=None, packed_width=None):
    """Outputs of `model` on every feature row (numpy, in row order), inference mode.

    Rows are batched by length bucket (`boundaries`, default: chosen from the rows' lengths; whole segments
    for a model reading long documents) and each batch is padded to its bucket's width.
    `strategy`: the model's distribution strategy (its variables were made under its scope); each batch is then
    split across its replicas (`distributed_inference`), else the model runs on the default device.
    `packed_width` (the tasks that pack): examples whose rows fit are packed into rows of that width, calls of
    about `batch_size` examples (`packing.inference_layouts`: one static shape for every call), one call per
    replica in each `strategy.run` (`packed_inference`); longer ones run by bucket.
    Per-position outputs (`Task.position_outputs`: SQuAD's start / end logits, token classification's logits) come
    back at their positions in the max_seq_len rows (right- or left-padded as the task's rows are), the rest
    filled with the heads' masked value.
    """
    from xlnet_tf.data import buckets, packing
    from xlnet_tf.heads import MASKED

    max_seq_len = features["input_ids"].shape[-1]
    lengths = features["length"]
    task = tasks.get(task)
    predict = distributed_inference(model, strategy, batch_size)
    positional = task.position_outputs
    outputs = {}

    def put(rows, values):
        for key, value in values.items():
            if key not in outputs:
                shape = (max_seq_len,) + value.shape[2:] if key in positional else value.shape[1:]
                outputs[key] = np.full((len(lengths),) + tuple(shape), MASKED if key in positional else 0,
                                       value.dtype)
            if key not in positional:
                outputs[key][rows] = value
            elif task.left_padded:  # left-padded rows: a cropped row is the row's last positions
                outputs[key][rows, max_seq_len - value.shape[1]:] = value
            else:
                outputs[key][rows, :value.shape[1]] = value  # right-padded rows: positions keep their index

    rest = np.arange(len(lengths))
    if packed_width and task.packs:
        sequences = packing.sequence_lengths(features)
        fits = sequences.reshape(len(lengths), -1).max(1) <= packed_width
        chosen, rest = np.flatnonzero(fits), np.flatnonzero(~fits)
        shape, calls = packing.inference_layouts(sequences[chosen], batch_size, packed_width)
        most = max((len(examples) for examples, _ in calls), default=0)

        def packed_batch(examples, layout):
            rows = chosen[examples]
            batch = packing.pack_rows({k: features[k][rows] for k in task.inputs}, layout.row, layout.offset,
                                      layout.slot, shape)
            slots = batch["example_slots"].numpy()  # padded to the most examples a call holds: one shape
            batch["example_slots"] = np.concatenate([slots, np.repeat(slots[:1], most - len(rows), 0)])
            return {k: np.asarray(v) for k, v in batch.items()}

        outputs_of_calls = packed_inference(model, strategy)(packed_batch(*call) for call in calls)
        for (examples, _), out in zip(calls, outputs_of_calls):
            put(chosen[examples], {k: v[:len(examples)] for k, v in out.items()})
    if len(rest):
        if boundaries is None:
            segment_len = model.head_config.get("segment_len") if hasattr(model, "head_config") else None
            boundaries = buckets.auto_boundaries(lengths[rest], max_seq_len, min_rows=batch_size,
                                                 multiple=segment_len or buckets.PAD_MULTIPLE)
        for bucket, rows in buckets.inference_batches(buckets.assign(lengths[rest], boundaries), batch_size):
            rows = rest[rows]
            put(rows, predict(crop({k: features[k][rows] for k in task.inputs}, boundaries[bucket],
                                   task.left_padded)))
    return outputs


def _on_tpu(strategy):
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.TPUStrategy)


def _replicated_call(model, strategy):
    """A traced function: a distributed batch (one part per replica) -> the model's outputs of every part,
    gathered in replica order (`strategy.gather`: every worker of a multi-worker run gets all), kept on the
    model."""
    import tensorflow as tf

    cache = model.__dict__.setdefault("_inference_functions", {})
    key = ("replicated", id(strategy))
    if key not in cache:
        @tf.function(autograph=False)
        def step(batch):
            outputs = strategy.run(tf.autograph.experimental.do_not_convert(lambda part: model(part, training=False)),
                                   args=(batch,))
            return {k: strategy.gather(v, axis=0) for k, v in outputs.items()}

        cache[key] = step
    return cache[key]


def packed_inference(model, strategy):
    """A function: packed batches (an iterable of `packing.pack_rows`' dicts of numpy, all of one shape) -> the
    model's outputs of each, in order (a generator). Under a strategy of several replicas (or a TPU) each
    `strategy.run` takes one batch per replica (the last run's spare replicas a copy of its last); else the
    model runs them one at a time on the default device."""
    import itertools

    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    if replicas == 1 and not (strategy is not None and _on_tpu(strategy)):
        call = distributed_inference(model, None, 0)
        return lambda batches: map(call, batches)
    step = _replicated_call(model, strategy)

    def run(batches):
        batches = iter(batches)
        while group := list(itertools.islice(batches, replicas)):
            full = group + group[-1:] * (replicas - len(group))
            parts = strategy.experimental_distribute_values_from_function(
                lambda context, full=full: full[context.replica_id_in_sync_group])
            outputs = {k: np.split(v.numpy(), replicas) for k, v in step(parts).items()}
            yield from ({k: v[i] for k, v in outputs.items()} for i in range(len(group)))

    return run


def distributed_inference(model, strategy, batch_size):
    """A function: batch dict of numpy [n, ...] (n <= batch_size) -> {output: numpy [n, ...]} from
    `model(batch, training=False)`, kept on the model. On one device it is traced once for batches of every size
    and width (`any_batch_and_width`); under a strategy with several replicas (or a TPU), once per batch shape.

    Under a strategy with several replicas (or a TPU) the batch is padded to `batch_size` rounded up to a
    multiple of the replicas (copies of its last row: every program sees one static shape per bucket), cut
    into equal contiguous shares, one per replica, run by one `strategy.run`, and gathered back in order
    (`strategy.gather`, so every worker of a multi-worker run gets every row)."""
    import tensorflow as tf

    from xlnet_tf.data import chunked

    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    on_tpu = strategy is not None and _on_tpu(strategy)
    cache = model.__dict__.setdefault("_inference_functions", {})
    key = (id(strategy), batch_size) if replicas > 1 or on_tpu else None
    if key not in cache:
        if key is None:  # one trace per model for every batch: their sizes and widths (by bucket) unknown
            call = chunked.one_trace_per_structure(
                tf.function(lambda batch: model(batch, training=False), autograph=False), any_batch_and_width)
            cache[key] = lambda batch: {k: v.numpy() for k, v in call(batch).items()}
        else:
            share = -(-batch_size // replicas)
            step = _replicated_call(model, strategy)

            def run(batch):
                count = len(next(iter(batch.values())))
                padded = {k: np.concatenate([v, np.repeat(v[-1:], share * replicas - count, 0)])
                          for k, v in batch.items()}
                shares = strategy.experimental_distribute_values_from_function(
                    lambda context: {k: v[context.replica_id_in_sync_group * share:][:share]
                                     for k, v in padded.items()})
                return {k: v.numpy()[:count] for k, v in step(shares).items()}

            cache[key] = run
    return cache[key]


def any_batch_and_width(value):
    """The spec of a batch's feature (numpy [n, ...]) with its batch axis, and the width (the last axis) of a
    per-position feature (rank >= 2, as `crop` cuts them), unknown: the batches of every bucket match it."""
    from xlnet_tf.data import chunked

    return chunked.any_count(value, (0, -1) if np.ndim(value) >= 2 else (0,))


def read_eval_data(finetune_config, path, tokenizer, labeled=True, skip_bad_rows=False, id_column=None):
    """`TaskData` of a file read as the fine-tuned model's config says (`labeled=False`: a prediction input, for
    token classification its words only; `id_column`: its rows' id column, `readers.read_examples`')."""
    doc_len = config_doc_len(finetune_config)
    task = finetune_config["task"]
    return load_task_data(task, path, tokenizer, finetune_config["max_seq_len"],
                          label_list=finetune_config.get("label_names"),
                          label_values=finetune_config.get("label_values"),
                          doc_stride=finetune_config.get("doc_stride", tasks.get(task).default_doc_stride(
                              finetune_config["max_seq_len"])),
                          max_query_len=finetune_config.get("max_query_len", 64), max_doc_len=doc_len,
                          tag_column=finetune_config.get("tag_column", -1),
                          label_all_pieces=finetune_config.get("label_all_pieces", False), labeled=labeled,
                          label_separator=finetune_config.get("label_separator", ","),
                          columns=finetune_config.get("columns"), skip_bad_rows=skip_bad_rows, id_column=id_column)


def _infer(model, finetune_config, path, tokenizer, batch_size, strategy=None, labeled=True, skip_bad_rows=False,
           data=None, id_column=None):
    """(TaskData, model outputs) for a file (`read_eval_data`; `data`: already read)."""
    if data is None:
        data = read_eval_data(finetune_config, path, tokenizer, labeled, skip_bad_rows, id_column)
    boundaries = finetune_config.get("bucket_boundaries")
    if boundaries is not None and boundaries[-1] != data.features["input_ids"].shape[-1]:  # buckets end at the rows
        boundaries = None
    packed = finetune_config.get("packing")
    return data, run_model(model, finetune_config["task"], data.features, batch_size,
                           None if boundaries is None else tuple(boundaries), strategy,
                           packed_width=packed["width"] if packed else None)


def evaluate_model(model, finetune_config, eval_file, tokenizer, batch_size=32, strategy=None, skip_bad_rows=False,
                   data=None):
    """Task metrics of `model` on `eval_file` (under `strategy`, when given: see `run_model`; `data`: the file
    already read by `read_eval_data`)."""
    data, outputs = _infer(model, finetune_config, eval_file, tokenizer, batch_size, strategy,
                           skip_bad_rows=skip_bad_rows, data=data)
    results = tasks.get(finetune_config["task"]).evaluate(data, outputs, finetune_config)
    results["examples"] = len(data.examples)
    return results


def load_for_inference(model_dir, strategy=None, checkpoint=None):
    """(model, finetune_config, tokenizer) of a fine-tuned directory; the model is built under `strategy`'s
    scope when given (its variables on every replica); `checkpoint`: `tasks.choose_checkpoint`'s."""
    import contextlib

    from xlnet_tf.model import SPM_FILE
    from xlnet_tf.tokenization import XLNetTokenizer, tokenizer_settings

    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model, finetune_config = tasks.load_finetuned(model_dir, dropout=0.0, dropatt=0.0, checkpoint=checkpoint)
    tokenizer = XLNetTokenizer(files.join(model_dir, SPM_FILE), **tokenizer_settings(finetune_config))
    return model, finetune_config, tokenizer


def evaluate(model_dir, eval_file, batch_size=32, strategy=None, skip_bad_rows=False, checkpoint=None):
    """`xlnet-tf evaluate`: metrics of a fine-tuned model directory on a labelled file (under `strategy`: see
    `run_model`; `skip_bad_rows`: skip and count the file's bad rows; `checkpoint`: `tasks.choose_checkpoint`'s)."""
    model, finetune_config, tokenizer = load_for_inference(model_dir, strategy, checkpoint)
    return evaluate_model(model, finetune_config, eval_file, tokenizer, batch_size, strategy, skip_bad_rows)


def predict(model_dir, input_file, output_file, batch_size=32, strategy=None, skip_bad_rows=False, checkpoint=None,
            id_column=None):
    """`xlnet-tf predict`: JSONL predictions, one line per input row (`tasks.base.aligned_predictions`: its row,
    line and id; a skipped row's error); SQuAD writes the official {id: answer} JSON and, beside it,
    `<output>.null_odds.json` ({id: null score}, for SQuAD 2.0's threshold). Under `strategy`: see `run_model`;
    `skip_bad_rows`: skip the input's bad rows (their lines say why); `checkpoint`: as `evaluate`'s; `id_column`:
    the input's id column (default: one named id or guid)."""
    task = tasks.get(tasks.read_finetune_config(model_dir)["task"])
    if id_column is not None and not task.reads_ids:
        raise UserError(f"--id-column is for inputs of rows (TSV / CSV / JSONL); {task.name} predictions carry "
                        "their input's own ids")
    model, finetune_config, tokenizer = load_for_inference(model_dir, strategy, checkpoint)
    data, outputs = _infer(model, finetune_config, input_file, tokenizer, batch_size, strategy, labeled=False,
                           skip_bad_rows=skip_bad_rows, id_column=id_column)
    return task.write_predictions(output_file, data, outputs, finetune_config)


def checkpoints_of(model_dir):
    """[(name, checkpoint prefix, step)] of a fine-tuned directory: every checkpoint in checkpoints/ (oldest first),
    then the best (MODEL_DIR/best) when there is one."""
    import os

    import tensorflow as tf

    from xlnet_tf.model import CHECKPOINT_PREFIX
    from xlnet_tf.tasks import BEST_DIR, read_best

    found = []
    state = tf.train.get_checkpoint_state(files.join(model_dir, "checkpoints"))
    for prefix in (state.all_model_checkpoint_paths if state else []):
        if not os.path.isabs(prefix) and "://" not in prefix:
            prefix = files.join(model_dir, "checkpoints", prefix)
        if files.exists(prefix + ".index"):
            found.append((files.basename(prefix), prefix, int(prefix.rsplit("-", 1)[1])))
    best = read_best(model_dir)
    if best is not None:
        found.append((BEST_DIR, files.join(model_dir, BEST_DIR, CHECKPOINT_PREFIX), int(best["step"])))
    return found


def evaluate_all_checkpoints(model_dir, eval_file, batch_size=32, strategy=None, skip_bad_rows=False,
                             best_metric=None):
    """`xlnet-tf evaluate --all-checkpoints`: the task's metrics of every checkpoint of a fine-tuned directory (the
    eval file read once) -> {"checkpoints": [{"checkpoint", "path", "step", "metrics"}], "metric", "best"},
    also written to MODEL_DIR/eval_all_checkpoints.json."""
    import tensorflow as tf

    from xlnet_tf.tasks import BEST_DIR
    from xlnet_tf.training.evaluation import ALL_CHECKPOINTS_FILE, check_metric, higher_is_better, improves
    from xlnet_tf.training.evaluation import metric_value

    model, finetune_config, tokenizer = load_for_inference(model_dir, strategy)
    task_name = finetune_config["task"]
    metric = best_metric or tasks.get(task_name).best_metric
    check_metric(task_name, metric)
    higher = higher_is_better(metric)
    listed = checkpoints_of(model_dir)
    if not listed:
        raise UserError(f"{model_dir}: no checkpoints (checkpoints/ or {BEST_DIR}/)")
    data = read_eval_data(finetune_config, eval_file, tokenizer, skip_bad_rows=skip_bad_rows)
    rows, best = [], None
    for name, prefix, step in listed:
        status = tf.train.Checkpoint(model=model).read(prefix)
        status.assert_existing_objects_matched()
        status.expect_partial()
        metrics = evaluate_model(model, finetune_config, eval_file, tokenizer, batch_size, strategy, data=data)
        rows.append({"checkpoint": name, "path": prefix, "step": step, "metrics": metrics})
        value = metric_value(metrics, metric)
        if best is None or improves(value, best[1], higher):
            best = (len(rows) - 1, value)
    result = {"metric": metric, "higher_is_better": higher, "best": rows[best[0]]["checkpoint"],
              "best_step": rows[best[0]]["step"], "best_value": best[1], "checkpoints": rows}
    files.write_json(files.join(model_dir, ALL_CHECKPOINTS_FILE), result, sort_keys=False)
    return result
