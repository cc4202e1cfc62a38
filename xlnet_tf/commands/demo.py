"""xlnet-tf demo: raw text to a served model on one machine (xlnet_tf.demo)."""

from __future__ import annotations

from xlnet_tf.commands.common import Command, local_only


def _demo(args):
    from xlnet_tf.demo import run_demo

    local_only("--workdir", args.workdir, "the demo reuses its local work folder on a rerun")
    run_demo(args.workdir, quick=args.quick, verbose=args.verbose)


def add_demo_arguments(parser):
    parser.add_argument("--workdir", default="demo_work", help="where every step keeps its output (reused on rerun)")
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 5 minutes on 2 CPU cores)")


DEMO = Command(
    "demo", "raw text -> pretraining -> fine-tuning -> export -> serving, on one machine",
    add_demo_arguments, _demo, log_folder="workdir")
