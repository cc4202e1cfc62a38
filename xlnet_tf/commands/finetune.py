"""xlnet-tf finetune: a task's head on a pretrained (or new) encoder; the task's own flag checks are
`FinetuneSetup`'s (xlnet_tf.tasks)."""

from __future__ import annotations

import argparse
import functools
import json

from xlnet_tf.commands.common import (Command, add_training_flags, column, loss_summary, start_run,
                                      training_options)
from xlnet_tf.errors import UserError


def _finetune(args):
    from xlnet_tf import files, tasks
    from xlnet_tf.config import RunOptions, XLNetConfig
    from xlnet_tf.model import CONFIG_FILE, SPM_FILE
    from xlnet_tf.training.finetune import FinetuneSetup, parse_widths, run_finetuning
    from xlnet_tf.training.pretrain import resolve_config

    if (args.train_steps is None) == (args.epochs is None):
        raise UserError("give exactly one of --train-steps and --epochs")
    columns = {key: column(value) for key, value in (("text_a", args.text_a_column), ("text_b", args.text_b_column),
                                                      ("label", args.label_column)) if value is not None}
    setup = functools.partial(
        FinetuneSetup, task=args.task, train_file=args.train_file, eval_file=args.eval_file, model_dir=args.model_dir,
        lower_case=args.lower_case, init_checkpoint=args.init_checkpoint, max_seq_len=args.max_seq_len,
        doc_stride=args.doc_stride, max_query_len=args.max_query_len, epochs=args.epochs,
        mixed_precision=args.mixed_precision, bucket_boundaries=args.bucket_boundaries, long_doc=args.long_doc,
        max_doc_len=args.max_doc_len, mem_len=args.mem_len, grad_segments=args.grad_segments,
        tag_column=args.tag_column, label_all_pieces=args.label_all_pieces, squad_head=args.squad_head,
        max_answer_length=args.max_answer_length, label_separator=args.label_separator,
        tune_thresholds=args.tune_thresholds, packing=args.packing, columns=columns or None,
        skip_bad_rows=args.skip_bad_rows, label_names=args.label_names, evaluation=_eval_schedule(args),
    )
    probe = setup(config=None, spm_model=None, run_options=None)  # bad flags fail before any work (the task's too)
    parse_widths(args.bucket_boundaries, args.max_seq_len, probe.doc_len)
    tasks.get(args.task).check_files(probe)  # a train or eval file without labels: before the run starts
    run_options = RunOptions(dropout=args.dropout, dropatt=args.dropatt, initializer_range=args.init_std,
                             recompute=args.recompute)
    if args.init_checkpoint:  # its recorded clamp_len / same_length / attn_type, under this run's flags
        from xlnet_tf.heads import finetune_run_options

        run_options = finetune_run_options(args.init_checkpoint, dropout=args.dropout, dropatt=args.dropatt,
                                           initializer_range=args.init_std,
                                           recompute=args.recompute)
    strategy = start_run(args)
    spm = args.spm_model or (args.init_checkpoint and files.join(args.init_checkpoint, SPM_FILE))
    if not spm or not files.exists(spm):
        raise UserError(f"--spm-model is needed (no {SPM_FILE} found: {spm})")
    if args.init_checkpoint:
        if args.config or args.model_size:
            raise UserError("--init-checkpoint brings its architecture; drop --config / --model-size")
        config = XLNetConfig.from_json(files.join(args.init_checkpoint, CONFIG_FILE))
    else:
        from xlnet_tf.tokenization import XLNetTokenizer

        config = resolve_config(args.config, args.model_size, XLNetTokenizer(spm).vocab_size)
    setup = setup(config=config, spm_model=spm, run_options=run_options)
    # With --epochs the step count is set once the training file is read.
    options = training_options(_with_steps(args, args.train_steps or 1), strategy, layer_decay=args.layer_decay)
    trainer, records, results = run_finetuning(setup, options, strategy)
    if records:
        print(f"fine-tuned to step {records[-1]['step']}: {loss_summary(records, options.steps_per_loop)}")
    if results:
        print(json.dumps(results, indent=2))
    _report_evaluation(trainer)
    return 143 if trainer.stopped_by_signal else 0


def _eval_schedule(args):
    """--eval-every / --eval-every-epoch / --best-metric / --early-stopping-patience as an `EvalSchedule`."""
    from xlnet_tf.training.evaluation import EvalSchedule

    return EvalSchedule(every=args.eval_every, every_epoch=args.eval_every_epoch, best_metric=args.best_metric,
                        patience=args.early_stopping_patience)


def _report_evaluation(trainer):
    """The best checkpoint evaluation during training kept, and where and why patience stopped the run."""
    hook = getattr(trainer, "hook", None)
    if hook is None or not hook.state:
        return
    if hook.stopped is not None:
        print(f"early stopping at step {hook.stopped[0]}: {hook.stopped[1]}")
    from xlnet_tf import files, tasks

    print(f"best checkpoint: step {hook.state['step']}, {hook.metric} {hook.state['value']:.6g} "
          f"({files.join(hook.model_dir, tasks.BEST_DIR)}; export, evaluate and predict use it)")


def _with_steps(args, steps):
    copy = argparse.Namespace(**vars(args))
    copy.train_steps = steps
    return copy


def _grad_segments(value):
    """--grad-segments: "all" -> 0, else a whole number >= 1."""
    if value == "all":
        return 0
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"'all' or a whole number >= 1, got {value!r}")
    return int(value)


def add_finetune_arguments(parser):
    from xlnet_tf.tasks import TASK_NAMES

    parser.add_argument("--task", required=True, choices=TASK_NAMES,
                          help="token-classification: tagged words (named entities, part of speech, slots) from "
                               "CoNLL-style files (a word per line, the tag in --tag-column, blank lines between "
                               "sentences) or JSONL ({\"tokens\": [...], \"tags\": [...]}); multi-label: texts "
                               "with any number of labels (JSONL: a list; TSV / CSV: --label-separator), each label "
                               "its own sigmoid and binary cross-entropy")
    parser.add_argument("--train-file", required=True)
    parser.add_argument("--eval-file", help="evaluated after training (metrics in MODEL_DIR/eval_results.json), "
                                            "and during it with --eval-every / --eval-every-epoch")
    schedule = parser.add_mutually_exclusive_group()
    schedule.add_argument("--eval-every", type=int, metavar="N",
                          help="score --eval-file every N steps and at the last (train_log.jsonl, TensorBoard eval/*, "
                               "training_curve.png) and keep the best checkpoint by --best-metric in MODEL_DIR/best "
                               "(best.json: its step and metrics), which export, evaluate and predict then use")
    schedule.add_argument("--eval-every-epoch", action="store_true",
                          help="as --eval-every, every ceil(training rows / --batch-size) steps")
    parser.add_argument("--best-metric", metavar="NAME",
                        help="with an evaluation schedule: the metric that picks the best checkpoint (default: "
                             "classification and race accuracy, regression pearson, multi-label micro_f1, squad f1, "
                             "token-classification f1; mse: lower is better)")
    parser.add_argument("--early-stopping-patience", type=int, metavar="K",
                        help="with an evaluation schedule: stop after K evaluations in a row without improvement of "
                             "--best-metric (a checkpoint is saved at that step)")
    parser.add_argument("--spm-model", help="default: INIT_CHECKPOINT/spiece.model")
    parser.add_argument("--lower-case", action="store_true", help="the SentencePiece model is uncased")
    parser.add_argument("--init-checkpoint",
                          help="a pretrained directory (pretrain's --model-dir or convert's OUT); the clamp_len, "
                               "same_length and attn_type it records (run_options.json) apply to fine-tuning and are "
                               "recorded in --model-dir for evaluate, predict and export (its mem_len, reuse_len "
                               "and bi_data are not: fine-tuning carries no memory and reads every row forward)")
    arch = parser.add_mutually_exclusive_group()
    arch.add_argument("--config", help="xlnet_config.json, for random initialisation")
    arch.add_argument("--model-size", choices=["tiny", "base", "large"], help="for random initialisation")
    add_training_flags(parser, steps_required=False)
    parser.add_argument("--epochs", type=float, help="instead of --train-steps")
    parser.add_argument("--max-seq-len", type=int, default=128)
    parser.add_argument("--layer-decay", type=float, default=1.0, help="layer-wise learning-rate decay")
    parser.add_argument("--doc-stride", type=int,
                          help="windows over long texts: SQuAD, context tokens between windows (default 128); "
                               "token-classification, pieces between the starts of a long sentence's windows "
                               "(default (--max-seq-len - 2) / 2; every word is predicted once, from the window "
                               "where it has the most context)")
    parser.add_argument("--max-query-len", type=int, default=64, help="SQuAD question tokens kept")
    parser.add_argument("--bucket-boundaries", default="auto", metavar="auto|none|L1,L2,...",
                          help="padding by length: every batch holds rows of each length stratum, each part "
                               "padded to its stratum's width (auto: up to 4 strata chosen from the training "
                               "file, fewer where a stratum's model call costs more than it saves: small "
                               "models, short runs; none: every row padded to --max-seq-len; L1,L2,...: these widths); "
                               "evaluate and predict batch by the same widths")
    parser.add_argument("--packing", default="auto", metavar="auto|none",
                          help="auto (the default): classification, regression, multi-label and race pack a step's "
                               "examples into rows of a fixed width (the longest training row), each example "
                               "attending only to itself, when that one model call computes no more positions than "
                               "the length strata with their other calls' one-time cost (small models, short "
                               "runs); evaluate and predict pack the same way. none: length strata only. SQuAD, "
                               "token classification and --long-doc memory never pack")
    parser.add_argument("--long-doc", choices=["truncate", "memory"], default="truncate",
                          help="texts longer than --max-seq-len: truncate (one window, the original's) or memory "
                               "(classification, regression, race: up to --max-doc-len tokens read as segments of "
                               "--max-seq-len, each attending to the Transformer-XL memory of the ones before)")
    parser.add_argument("--max-doc-len", type=int, help="with --long-doc memory: tokens kept per document")
    parser.add_argument("--mem-len", type=int, default=0,
                          help="with --long-doc memory: memory positions per layer (default: every earlier segment)")
    parser.add_argument("--grad-segments", type=_grad_segments, default=0, metavar="all|K",
                          help="with --long-doc memory: the last K segments' memory keeps its gradient (all, the "
                               "default: every segment learns, as in one window over the document; 1: the last "
                               "only, memory without gradient as the paper's stop_gradient: less memory and time)")
    parser.add_argument("--squad-head", choices=["beam", "simple"], default="beam",
                          help="squad: beam (the original's: end logits conditioned on the start, top 5 x 5 spans, "
                               "an answerability head) or simple (transformers' XLNetForQuestionAnsweringSimple: "
                               "start / end logits from one dense layer, spans scored by start + end logit, the "
                               "null answer by the <cls> score)")
    parser.add_argument("--max-answer-length", type=int, default=64,
                          help="squad: pieces of a predicted answer at most (predict, evaluate, export)")
    parser.add_argument("--label-separator", default=",",
                          help="multi-label, TSV / CSV: what separates the labels of one field (an empty field: no "
                               "label)")
    parser.add_argument("--tune-thresholds", action="store_true",
                          help="multi-label: tune each label's threshold on --eval-file for its best F1 (default "
                               "0.5 each); recorded, used by evaluate, predict and export")
    for part, default in (("text-a", "text_a, or the file's one column named text, sentence, review, content, "
                                     "comment or document (any case)"), ("text-b", "text_b when there is one"),
                          ("label", "label")):
        parser.add_argument(f"--{part}-column", metavar="NAME|N",
                              help=f"classification, regression, multi-label: the TSV / CSV column (its header's name, "
                                   f"or its number, 0 = first, in a file without a header row) or JSONL key of the "
                                   f"{part.replace('-', ' ')} (default: {default}); recorded for evaluate and predict")
    parser.add_argument("--label-names", metavar="NAME,NAME,...|VALUE=NAME,...|@FILE",
                        help="classification, multi-label: names for the training file's label values, which "
                             "predict, evaluate, export and the server then give: NAME,NAME,... in the values' order "
                             "(numeric when all are whole numbers, else as text: for a file of 0 / 1 labels, "
                             "negative,positive names 0 negative and 1 positive), or VALUE=NAME,... "
                             "(0=negative,1=positive), or @FILE (the same items, one a line); a different name "
                             "for each value of the file, no name "
                             "holding ',' (nor '=' in the first form). Recorded (label_names; the file's values as "
                             "label_values, so evaluate reads files of either). Labels that are names already need "
                             "none")
    parser.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (questions, sentences) of "
                          "--train-file and --eval-file, each logged with its line, instead of stopping at the first")
    parser.add_argument("--tag-column", type=int, default=-1,
                          help="token-classification, CoNLL files: the tag's column (0 = the word's, -1 = the last)")
    parser.add_argument("--label-all-pieces", action="store_true",
                          help="token-classification: every piece of a word carries the word's tag in the loss "
                               "(default: the word's first piece only, the others ignored; predictions are read "
                               "from the first piece either way)")
    parser.set_defaults(learning_rate=2e-5, batch_size=32, save_every=500)


FINETUNE = Command(
    "finetune", "fine-tune on classification, regression, SQuAD, RACE or token classification",
    add_finetune_arguments, _finetune,
    input_paths=("train_file", "eval_file", "spm_model", "init_checkpoint", "config"), log_folder="model_dir")
