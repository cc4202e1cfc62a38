"""What the `xlnet-tf` commands share: `Command` (a command's name, flags, run function, input paths and log file),
the flags of training and of tf.distribute, the Beam runner flag, and the run's setup (strategy, seeds, options).

Cheap to import: TensorFlow and the library load inside the functions that need them."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
from typing import Callable

from xlnet_tf.config import RECOMPUTE_MODES
from xlnet_tf.errors import UserError


@dataclasses.dataclass(frozen=True)
class Command:
    """One `xlnet-tf` command: `name` and one-line `help`; `add_arguments(parser)` adds its flags; `run(args)` does
    the work (returns the exit status, or None for 0). `input_paths`: its flags (by dest) that name what must exist
    before it starts (`input_globs` among them may be globs; `companions(args, dest)`: other paths whose existence
    will do, as a checkpoint prefix's .index). Its log file: LOG_FOLDER/xlnet-tf.log for the flag (dest)
    `log_folder`, VALUE.log for the flag `log_beside` = (dest, as its help shows it), else COMMAND.log under
    $TMPDIR/xlnet-tf-logs."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int | None]
    input_paths: tuple[str, ...] = ()
    input_globs: tuple[str, ...] = ()
    companions: Callable[[argparse.Namespace, str], tuple[str, ...]] | None = None
    log_folder: str | None = None
    log_beside: tuple[str, str] | None = None

    def log_target(self, args):
        """Where this command's log file belongs (a remote path is not written to, see `log_file`)."""
        from xlnet_tf import files
        from xlnet_tf.console import LOG_FILE

        if self.log_beside:
            return getattr(args, self.log_beside[0]) + ".log"
        if self.log_folder:
            return files.join(getattr(args, self.log_folder), LOG_FILE)
        return temporary_log(self.name)

    def log_help(self):
        """The log file as --verbose's help names it."""
        if self.log_beside:
            where = f"{self.log_beside[1]}.log"
        elif self.log_folder:
            where = f"{self.log_folder.upper()}/xlnet-tf.log"
        else:
            return f"$TMPDIR/xlnet-tf-logs/{self.name}.log"
        return where + " (a local file under $TMPDIR/xlnet-tf-logs when that folder is remote)"

    def check_inputs(self, args, parser):
        """Each of `input_paths` that names nothing that exists is an error naming the flag (as `parser`, the
        command's leaf parser, spells it) and the path (`files.require`), before the command does anything else."""
        from xlnet_tf import files

        names = {action.dest: action.option_strings[0] if action.option_strings else action.metavar or action.dest
                 for action in parser._actions}
        for dest in self.input_paths:
            values = getattr(args, dest, None)
            for value in values if isinstance(values, list) else [values]:
                if value:
                    files.require(value, names[dest], pattern=dest in self.input_globs,
                                  also=self.companions(args, dest) if self.companions else ())


def add_strategy_flags(parser, what=""):
    """--strategy, --tpu, --cpu-devices (`what`: said of the strategy in its help)."""
    parser.add_argument("--strategy", default="auto", choices=["auto", "one_device", "mirrored", "multi_worker", "tpu"],
                        help=f"tf.distribute strategy{what}")
    parser.add_argument("--tpu", help="TPU name, grpc:// address, or 'local' on a TPU VM (with --strategy tpu or "
                                      "auto; default: $TPU_NAME)")
    parser.add_argument("--cpu-devices", type=int, default=2, help="logical CPU devices for --strategy mirrored without GPUs")


def distribution_strategy(args):
    """The tf.distribute strategy of --strategy / --tpu / --cpu-devices."""
    from xlnet_tf.training.strategies import make_strategy

    return make_strategy(args.strategy, tpu=args.tpu, cpu_devices=args.cpu_devices)


def add_training_flags(parser, steps_required=True):
    """The flags pretrain and finetune share: the model directory, the optimizer, checkpoints, precision, the
    strategy, seeds, dropout and recomputation."""
    parser.add_argument("--model-dir", required=True, help="checkpoints, logs and the trained model go here (a local folder or gs://...)")
    parser.add_argument("--train-steps", type=int, required=steps_required, help="optimizer steps in all")
    parser.add_argument("--batch-size", type=int, default=32, help="global batch (all replicas), per micro-batch")
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--warmup-steps", type=int, default=0)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--clip-norm", type=float, default=1.0, help="clip gradients by this global norm (0 = off)")
    parser.add_argument("--grad-accum-steps", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--steps-per-loop", type=int,
                        help="optimizer steps per host call (one log line each); default 1000 on a TPU (the "
                             "original's --iterations: a host call costs a TPU far more than a GPU), else 10; "
                             "never more than --save-every")
    parser.add_argument("--save-every", type=int, default=1000, help="checkpoint every this many steps")
    parser.add_argument("--keep-checkpoints", type=int, default=5)
    add_strategy_flags(parser)
    parser.add_argument("--mixed-precision", choices=["bfloat16", "float16"],
                        help="bfloat16 (TPUs, A100 / H100, AVX512_BF16 / AMX CPUs) or float16 (GPUs with tensor cores: "
                             "V100, T4, ...; with dynamic loss scaling) compute, float32 weights")
    parser.add_argument("--initial-loss-scale", type=float, default=2.0 ** 15,
                        help="float16: the loss scale to start from (halved on overflow, doubled after "
                             "--loss-scale-growth-steps finite steps; Keras' defaults)")
    parser.add_argument("--loss-scale-growth-steps", type=int, default=2000,
                        help="float16: finite steps in a row before the loss scale doubles")
    parser.add_argument("--jit-compile", action="store_true", help="compile the whole replica step (forward, backward, "
                        "accumulation, all-reduce, clipping, AdamW) with XLA (one device, GPUs, TPUs)")
    parser.add_argument("--deterministic", action="store_true", help="deterministic TensorFlow ops")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--dropatt", type=float, default=0.1)
    parser.add_argument("--init-std", type=positive_float, metavar="STD",
                        help="stddev of the normal initialiser of the weights that start at random (the original's "
                             "--init_std; default: 0.02 at the published widths, d_model 768 and 1024, and "
                             "0.02 x sqrt(768 / d_model) for narrower models: 0.069 for --model-size tiny)")
    parser.add_argument("--recompute", default="none", choices=RECOMPUTE_MODES,
                        help="recompute in the backward pass instead of keeping: blocks = every block's activations "
                             "(least memory, about a third more compute), attention = only the attention scores "
                             "and probabilities (the part that grows with length squared)")


def positive_float(value):
    """A number > 0 (argparse type)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number > 0, got {value!r}") from None
    if not number > 0:
        raise argparse.ArgumentTypeError(f"a number > 0, got {value!r}")
    return number


def add_runner_flag(parser, what):
    """--runner: the command as an Apache Beam pipeline (`what`: said of it in the help)."""
    parser.add_argument("--runner", metavar="RUNNER",
                        help=f"run as an Apache Beam pipeline ({what}) on this runner: DirectRunner (this machine), "
                             "DataflowRunner, FlinkRunner, SparkRunner, ...; Beam's own pipeline options (--project, "
                             "--temp_location, --direct_num_workers, ...) follow on the command line; needs "
                             "pip install 'xlnet-tf[beam]'")


def training_options(args, strategy, **extra):
    """`TrainingOptions` of add_training_flags' flags (`extra`: a command's own fields)."""
    from xlnet_tf.training.loop import TrainingOptions
    from xlnet_tf.training.strategies import default_steps_per_loop

    steps_per_loop = args.steps_per_loop or default_steps_per_loop(strategy)
    return TrainingOptions(
        train_steps=args.train_steps, batch_size=args.batch_size, learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps, weight_decay=args.weight_decay, clip_norm=args.clip_norm,
        grad_accum_steps=args.grad_accum_steps, steps_per_loop=steps_per_loop, save_every=args.save_every,
        keep_checkpoints=args.keep_checkpoints, jit_compile=args.jit_compile, seed=args.seed,
        initial_loss_scale=args.initial_loss_scale, loss_scale_growth_steps=args.loss_scale_growth_steps, **extra,
    )


def column(value):
    """A column flag (--text-a-column, --label-column, --id-column, ...): a whole number is a column number, else a
    name."""
    return int(value) if re.fullmatch(r"-?\d+", value.strip()) else value


def loss_summary(records, steps_per_loop):
    """The losses of a run's log `records` as finetune and pretrain print them: each with its step, so that one log
    point does not read as a loss that never moved ("loss 0.5645 at step 10 (one log point; --steps-per-loop 10)",
    else "loss 0.6931 at step 10 -> 0.5645 at step 300")."""
    first, last = records[0], records[-1]
    if len(records) == 1:
        return f"loss {last['loss']:.4f} at step {last['step']} (one log point; --steps-per-loop {steps_per_loop})"
    return f"loss {first['loss']:.4f} at step {first['step']} -> {last['loss']:.4f} at step {last['step']}"


def start_run(args):
    """Strategy first (logical CPU devices must be set before TensorFlow initialises them), then seeds."""
    strategy = distribution_strategy(args)
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(args.seed)
    if args.deterministic:
        tf.config.experimental.enable_op_determinism()
    return strategy


@contextlib.contextmanager
def beam_console(args):
    """Where a Beam pipeline runs: Beam installed (or a UserError saying how), and, unless --verbose, Beam's
    import warnings and the runner's worker processes (which write to this process's stderr) in the log file."""
    from xlnet_tf.console import native_output_to
    from xlnet_tf.pipelines.common import require_beam

    with native_output_to(None if args.verbose else log_file(args)):
        require_beam()
        yield


def local_only(flag, path, why):
    """Refuses a remote `path` for a flag whose command works on local folders only (before any work)."""
    from xlnet_tf import files

    if path and files.is_remote(path):
        raise UserError(f"{flag} must be a local folder ({why}); got {path}")


def temporary_log(command):
    """COMMAND.log under the system's temporary folder (a command without a work folder)."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), "xlnet-tf-logs", f"{command}.log")


def log_file(args):
    """The command's log file. A log is appended line by line, which object stores cannot do: where its
    `Command.log_target` is remote (gs://...), a local file named after it under the system's temporary folder
    (`files.local_log_path`; the command says where); where its local folder exists but cannot be written,
    COMMAND.log under the temporary folder. `args`: parsed by `xlnet_tf.cli.build_parser` (which records the
    command in them)."""
    from xlnet_tf import files

    target = args.command_spec.log_target(args)
    if files.is_remote(target):
        return files.local_log_path(files.dirname(target), files.basename(target))
    folder = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)  # the folders the log creates: writable where the first existing one is
    if not os.access(folder, os.W_OK) or os.path.exists(target) and not os.access(target, os.W_OK):
        return temporary_log(args.command)
    return target


# How a command-line user overrides a recorded run option that a command cannot run with (no flag sets them).
UNRECORD_HINT = "remove them from that file (or convert again with other values)"
