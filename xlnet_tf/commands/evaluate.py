"""xlnet-tf evaluate: a fine-tuned model's metrics on a labelled file (or every checkpoint's: --all-checkpoints)."""

from __future__ import annotations

import json

from xlnet_tf.commands.common import Command, add_strategy_flags, distribution_strategy
from xlnet_tf.errors import UserError

CHECKPOINT_HELP = ("which weights: best (MODEL_DIR/best, kept by `finetune --eval-every`), last (the latest of "
                   "MODEL_DIR/checkpoints), or a checkpoint PATH (a directory, or a prefix such as "
                   "MODEL_DIR/checkpoints/ckpt-100); default: best when there is one, else last")


def add_checkpoint_flag(parser):
    parser.add_argument("--checkpoint", metavar="best|last|PATH", help=CHECKPOINT_HELP)


def checkpoint_used(model_dir, checkpoint):
    """The `tasks.choose_checkpoint` of a command, and its line when the directory has a best (or one was asked
    for); else None (a directory trained without evaluation: the output as before)."""
    from xlnet_tf import tasks

    chosen = tasks.choose_checkpoint(model_dir, checkpoint)
    return chosen, (tasks.describe_checkpoint(chosen) if chosen["given"] else None)


def _evaluate(args):
    if args.all_checkpoints:
        if args.checkpoint:
            raise UserError("--all-checkpoints evaluates every checkpoint; drop --checkpoint")
        from xlnet_tf.training.evaluation import ALL_CHECKPOINTS_FILE, scalars
        from xlnet_tf.training.finetune import evaluate_all_checkpoints
        from xlnet_tf import files

        result = evaluate_all_checkpoints(args.model_dir, args.eval_file, args.batch_size,
                                          distribution_strategy(args), skip_bad_rows=args.skip_bad_rows,
                                          best_metric=args.best_metric)
        for row in result["checkpoints"]:
            figures = " ".join(f"{k} {v:.6g}" for k, v in scalars(row["metrics"]).items())
            print(f"{row['checkpoint']} (step {row['step']}): {figures}")
        print(f"best by {result['metric']}: {result['best']} (step {result['best_step']}, {result['metric']} "
              f"{result['best_value']:.6g}); all in {files.join(args.model_dir, ALL_CHECKPOINTS_FILE)}")
        return
    if args.best_metric:
        raise UserError("--best-metric goes with --all-checkpoints")
    from xlnet_tf.training.finetune import evaluate

    chosen, line = checkpoint_used(args.model_dir, args.checkpoint)
    results = evaluate(args.model_dir, args.eval_file, args.batch_size, distribution_strategy(args),
                       skip_bad_rows=args.skip_bad_rows, checkpoint=args.checkpoint)
    if line:
        results["checkpoint"] = {k: chosen[k] for k in ("checkpoint", "path", "step", "metric", "value")}
    print(json.dumps(results, indent=2))


def add_evaluate_arguments(parser):
    parser.add_argument("--model-dir", required=True,
                          help="a fine-tuned directory (computed with the run options it records, run_options.json)")
    parser.add_argument("--eval-file", required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (questions, sentences) of "
                          "--eval-file, each logged with its line, instead of stopping at the first")
    add_checkpoint_flag(parser)
    parser.add_argument("--all-checkpoints", action="store_true",
                        help="evaluate every checkpoint of MODEL_DIR/checkpoints and MODEL_DIR/best: one line each, "
                             "then the best by --best-metric; all written to MODEL_DIR/eval_all_checkpoints.json")
    parser.add_argument("--best-metric", metavar="NAME", help="with --all-checkpoints: the metric that picks the best "
                        "(default: the task's, as finetune's --best-metric)")
    add_strategy_flags(parser, " (each batch split across its replicas)")


EVALUATE = Command(
    "evaluate", "metrics of a fine-tuned model on a labelled file",
    add_evaluate_arguments, _evaluate, input_paths=("model_dir", "eval_file"))
