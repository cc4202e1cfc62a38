"""xlnet-tf sample-data, train-spm and create-pretraining-data: text and data before training."""

from __future__ import annotations

from xlnet_tf.commands.common import Command, add_runner_flag, beam_console, log_file


def _sample_data(args):
    from xlnet_tf.sample_data import write_sample

    print(write_sample(args.task, args.output_dir, seed=args.seed))


def _train_spm(args):
    from xlnet_tf.tokenization import train_spm

    path = train_spm(args.input, args.model_prefix, args.vocab_size, lower_case=args.lower_case,
                     log_file=None if args.verbose else log_file(args))
    print(f"wrote {path} and {args.model_prefix}.vocab")


def _create_pretraining_data(args):
    settings = dict(seq_len=args.seq_len, reuse_len=args.reuse_len, num_shards=args.num_shards, seed=args.seed,
                    bi_data=args.bi_data, lower_case=True if args.lower_case else None,
                    skip_bad_lines=args.skip_bad_lines)
    if args.runner:
        with beam_console(args):
            from xlnet_tf.pipelines.common import pipeline_options
            from xlnet_tf.pipelines.pretraining_data import create_pretraining_data_beam

            create_pretraining_data_beam(args.input, args.spm_model, args.output_dir,
                                         pipeline_options(args.runner, args.beam_args), **settings)
        return
    from xlnet_tf.data.pretraining import create_pretraining_data

    create_pretraining_data(args.input, args.spm_model, args.output_dir, **settings)


def add_sample_data_arguments(parser):
    from xlnet_tf.sample_data import SAMPLES

    parser.add_argument("--task", required=True, choices=sorted(SAMPLES),
                        help="corpus (corpus.txt for train-spm / create-pretraining-data) or a finetune --task's "
                             "train and dev files in its usual format (TSV, SQuAD JSON, RACE JSON files, CoNLL)")
    parser.add_argument("--output-dir", required=True, metavar="DIR", help="the folder to write into (created)")
    parser.add_argument("--seed", type=int, default=0, help="the shuffle of the train / dev split")


SAMPLE_DATA = Command(
    "sample-data", "write a small dataset made from Python's bundled documentation: a corpus or a task's train "
    "and dev files (nothing downloaded)",
    add_sample_data_arguments, _sample_data)


def add_train_spm_arguments(parser):
    parser.add_argument("--input", nargs="+", required=True, metavar="FILE", help="plain-text files, one sentence per line")
    parser.add_argument("--model-prefix", required=True, metavar="PREFIX", help="writes PREFIX.model and PREFIX.vocab")
    parser.add_argument("--vocab-size", type=int, required=True, metavar="N")
    parser.add_argument("--lower-case", action="store_true", help="an uncased model (lower-cases before training)")


TRAIN_SPM = Command(
    "train-spm", "train a SentencePiece model with XLNet's special ids and rules",
    add_train_spm_arguments, _train_spm, input_paths=("input",), log_beside=("model_prefix", "PREFIX"))


def add_create_pretraining_data_arguments(parser):
    parser.add_argument("--input", nargs="+", required=True, metavar="FILE_OR_GLOB",
                      help="UTF-8 text, one sentence (or paragraph) per line, blank lines between documents "
                           "(paths or globs; gs:// and other filesystems TensorFlow, or with --runner Beam, reads)")
    parser.add_argument("--spm-model", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--reuse-len", type=int, default=256)
    parser.add_argument("--num-shards", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bi-data", action="store_true", help="also write records of the reversed text")
    parser.add_argument("--lower-case", action="store_true", help="the SentencePiece model is uncased (default: inferred)")
    parser.add_argument("--skip-bad-lines", action="store_true", help="skip and count lines that are not UTF-8")
    add_runner_flag(parser, "the same records as without it")


CREATE_PRETRAINING_DATA = Command(
    "create-pretraining-data", "plain text -> sharded pretraining TFRecords",
    add_create_pretraining_data_arguments, _create_pretraining_data,
    input_paths=("input", "spm_model"), input_globs=("input",), log_folder="output_dir")
