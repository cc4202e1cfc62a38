"""The `xlnet-tf` commands, one module each (or a few that belong together): each defines its flags beside what
it runs, as a `Command` (common.py). `COMMANDS` is their order in `xlnet-tf --help`; xlnet_tf.cli builds the
parser from it. A new command: its module and its line here."""

from __future__ import annotations

from xlnet_tf.commands import (benchmark, convert, data, demo, evaluate, export, finetune, generate, plot_attention,
                               predict, pretrain, serve)

COMMANDS = (data.SAMPLE_DATA, data.TRAIN_SPM, data.CREATE_PRETRAINING_DATA, pretrain.PRETRAIN, finetune.FINETUNE,
            evaluate.EVALUATE, predict.PREDICT, generate.GENERATE, demo.DEMO, export.EXPORT,
            plot_attention.PLOT_ATTENTION, serve.SERVE, serve.QUERY, benchmark.BENCHMARK, convert.CONVERT)
