"""xlnet-tf pretrain: permutation (or masked) language model pretraining on tf.distribute."""

from __future__ import annotations

from xlnet_tf.commands.common import Command, add_training_flags, loss_summary, start_run, training_options
from xlnet_tf.errors import UserError


def _pretrain(args):
    from xlnet_tf.config import RunOptions
    from xlnet_tf.data.pretraining_records import load_metadata
    from xlnet_tf.training.pretrain import PretrainingSetup, resolve_config, run_pretraining

    strategy = start_run(args)
    metadata = load_metadata(args.data_dir)
    if args.seq_len is not None and args.seq_len != metadata["seq_len"]:
        raise UserError(f"--seq-len {args.seq_len} differs from the data's seq_len {metadata['seq_len']} "
                        f"({args.data_dir}/metadata.json)")
    config = resolve_config(args.config, args.model_size, metadata["vocab_size"])
    run_options = RunOptions(
        dropout=args.dropout, dropatt=args.dropatt, initializer_range=args.init_std, recompute=args.recompute,
        mem_len=metadata["reuse_len"] if args.mem_len is None else args.mem_len,
        reuse_len=metadata["reuse_len"], bi_data=bool(metadata.get("bi_data")), clamp_len=args.clamp_len,
    )
    num_predict = args.num_predict or max(1, round(metadata["seq_len"] / 6))
    setup = PretrainingSetup(args.data_dir, args.model_dir, config, run_options, num_predict, args.objective,
                             args.mixed_precision)
    options = training_options(args, strategy)
    trainer, records = run_pretraining(setup, options, strategy)
    if records:
        print(f"pretrained to step {records[-1]['step']}: {loss_summary(records, options.steps_per_loop)}; "
              f"model directory {args.model_dir}")
    if trainer.stopped_by_signal:
        return 143
    return 0


def add_pretrain_arguments(parser):
    parser.add_argument("--data-dir", required=True, help="output of create-pretraining-data")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--config", help="xlnet_config.json (the architecture)")
    size.add_argument("--model-size", choices=["tiny", "base", "large"])
    add_training_flags(parser)
    parser.add_argument("--seq-len", type=int, help="must equal the data's (checked)")
    parser.add_argument("--mem-len", type=int, help="memory length (default: the data's reuse_len)")
    parser.add_argument("--num-predict", type=int, help="targets per sequence (default: seq_len / 6)")
    parser.add_argument("--clamp-len", type=int, default=-1)
    parser.add_argument("--objective", choices=["plm", "mlm"], default="plm")


PRETRAIN = Command(
    "pretrain", "permutation-LM pretraining on tf.distribute",
    add_pretrain_arguments, _pretrain, input_paths=("data_dir", "config"), log_folder="model_dir")
