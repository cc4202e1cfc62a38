"""xlnet-tf evaluate: a fine-tuned model's metrics on a labelled file."""

from __future__ import annotations

import json

from xlnet_tf.commands.common import Command, add_strategy_flags, distribution_strategy


def _evaluate(args):
    from xlnet_tf.training.finetune import evaluate

    print(json.dumps(evaluate(args.model_dir, args.eval_file, args.batch_size, distribution_strategy(args),
                              skip_bad_rows=args.skip_bad_rows), indent=2))


def add_evaluate_arguments(parser):
    parser.add_argument("--model-dir", required=True,
                          help="a fine-tuned directory (computed with the run options it records, run_options.json)")
    parser.add_argument("--eval-file", required=True)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--skip-bad-rows", action="store_true", help="skip bad rows (questions, sentences) of "
                          "--eval-file, each logged with its line, instead of stopping at the first")
    add_strategy_flags(parser, " (each batch split across its replicas)")


EVALUATE = Command(
    "evaluate", "metrics of a fine-tuned model on a labelled file",
    add_evaluate_arguments, _evaluate, input_paths=("model_dir", "eval_file"))
