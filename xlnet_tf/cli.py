"""`xlnet-tf` command line: the parser of every command (xlnet_tf.commands: each command's flags beside what it
runs), the console and log file, and one line for a user's mistake."""

from __future__ import annotations

import argparse
import sys

from xlnet_tf.errors import UserError


def build_parser():
    """The `xlnet-tf` parser: a sub-command per `xlnet_tf.commands.COMMANDS` (flags from each command's module), each
    with --verbose; the parsed arguments carry the command (`command_spec`) and its `run`."""
    from xlnet_tf.arguments import Parser
    from xlnet_tf.commands import COMMANDS

    parser = Parser(prog="xlnet-tf", description="XLNet on Keras 3 / TensorFlow 2.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command_parser = commands.add_parser(command.name, help=command.help)
        command.add_arguments(command_parser)
        command_parser.set_defaults(run=command.run, command_spec=command)
        verbose_help = ("also show on the console other libraries' log records (always written to the log file) and "
                        f"TensorFlow's C++ lines (else written there only); the log file: {command.log_help()}")
        command_parser.add_argument("--verbose", action="store_true", help=verbose_help)
        # A command with sources (convert): --verbose before or after its SOURCE (SUPPRESS: the source's parser
        # keeps a --verbose given before it).
        for action in command_parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for source in action.choices.values():
                    source.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                                        help=verbose_help)
    return parser


def main(argv=None):
    """Runs one command; returns its exit status (2: a user's mistake, named without a traceback).

    Unless --verbose, what native code writes to stderr goes to the command's log file
    (`console.QuietNativeOutput`). Called with `argv` (from Python, a test) the console is put back on return;
    as the program (`argv` None) it stays so to the end, where TensorFlow and gRPC may still write at exit."""
    from xlnet_tf.arguments import leaf_parser, option_strings
    from xlnet_tf.commands.common import log_file as commands_log_file
    from xlnet_tf.console import QuietNativeOutput, configure

    parser = build_parser()
    args, beam_args = parser.parse_known_args(argv)
    command_parser = leaf_parser(parser, args)
    if beam_args and not getattr(args, "runner", None):
        command_parser.unrecognized(beam_args)  # the command's own usage and "unrecognized arguments"
    args.beam_args = beam_args
    native = None if args.verbose else QuietNativeOutput()
    if native is not None and argv is None:
        import faulthandler

        faulthandler.enable(sys.stderr)  # a crash in native code still shows where, on the console
    try:
        args.command_spec.check_inputs(args, command_parser)
        log_file = commands_log_file(args)
        configure(log_file, args.verbose)
        if native is not None:
            native.into(log_file)
        if log_file != args.command_spec.log_target(args):
            import logging

            logging.getLogger("xlnet_tf").info("other libraries' log lines go to %s (%s is remote or not "
                                               "writable)", log_file, args.command_spec.log_target(args))
        return args.run(args) or 0
    except (UserError, FileNotFoundError) as error:
        message = error.for_command(option_strings(command_parser)) if isinstance(error, UserError) else error
        print(f"xlnet-tf {args.command}: error: {message}", file=sys.stderr)
        return 2
    finally:
        if native is not None and argv is not None:
            native.close()


if __name__ == "__main__":
    sys.exit(main())
