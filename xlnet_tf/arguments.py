"""argparse as the `xlnet-tf` commands use it: no abbreviated flags (`--train-step` is not `--train-steps`), a
command's own short usage and one line on a mistake, and "did you mean" for a mistyped choice or flag.

Cheap to import (argparse and difflib only).
"""

from __future__ import annotations

import argparse
import difflib
import sys

# Words people type for a choice that has another name here -> that choice.
CHOICE_ALIASES = {
    "ner": "token-classification", "pos": "token-classification", "chunking": "token-classification",
    "tagging": "token-classification", "slot-filling": "token-classification", "token": "token-classification",
    "qa": "squad", "question-answering": "squad", "extractive-qa": "squad",
    "multilabel": "multi-label", "multi_label": "multi-label",
    "multiple-choice": "race", "multichoice": "race",
    "sentiment": "classification", "text-classification": "classification", "glue": "classification",
    "sts": "regression", "similarity": "regression",
    "hf": "huggingface", "transformers": "huggingface", "tf1": "official",
}


def suggestion(value, choices):
    """' (did you mean X?)' for a `value` close to one of `choices` or one of CHOICE_ALIASES, else ''."""
    choices = [str(choice) for choice in choices]
    value = str(value)
    alias = CHOICE_ALIASES.get(value.lower())
    if alias in choices:
        return f"; did you mean {alias!r}?"
    close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
    if not close:
        close = [choice for choice in choices if value.lower() == choice.lower()]
    return f"; did you mean {close[0]!r}?" if close else ""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser without abbreviations whose error is its own short usage (the command, its required
    flags, `--help`) and one line; its sub-commands' parsers are of this class too."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            shown = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from {shown})"
                                                 f"{suggestion(value, action.choices)}")

    def short_usage(self):
        """'usage: PROG REQUIRED... [options]': the required flags and positionals only (--help lists all)."""
        parts = []
        for action in self._actions:
            if action.option_strings and action.required:
                parts.append(f"{action.option_strings[0]} {action.metavar or action.dest.upper()}")
            elif not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                parts.append(action.metavar or action.dest.upper())
            elif isinstance(action, argparse._SubParsersAction):
                parts.append(f"{action.metavar or 'COMMAND'} ...")
        for group in self._mutually_exclusive_groups:
            if group.required:
                parts.append("(" + " | ".join(a.option_strings[0] for a in group._group_actions) + ")")
        options = "" if any(isinstance(a, argparse._SubParsersAction) for a in self._actions) else " [options]"
        return f"usage: {' '.join([self.prog, *parts])}{options} ({self.prog} --help lists them)\n"

    def error(self, message):
        sys.stderr.write(self.short_usage())
        self.exit(2, f"{self.prog}: error: {message}\n")

    def unrecognized(self, extras):
        """Exits with argparse's 'unrecognized arguments' error, naming the closest flags of this parser."""
        flags = option_strings(self)
        hints = []
        for extra in extras:
            name = extra.split("=", 1)[0]
            if name.startswith("-"):  # an abbreviation's flags, else the closest one
                close = sorted(flag for flag in flags if flag.startswith(name))[:3] or \
                    difflib.get_close_matches(name, sorted(flags), n=1, cutoff=0.75)
                if close:
                    hints.append(f"{name}: did you mean {' or '.join(close)}?")
        self.error(f"unrecognized arguments: {' '.join(extras)}" + (f" ({'; '.join(hints)})" if hints else ""))


def option_strings(parser):
    """Every flag `parser` takes (its option strings)."""
    return {name for action in parser._actions for name in action.option_strings}


def leaf_parser(parser, argv_namespace):
    """The parser of the (sub-)command a parsed namespace ran: `parser`'s sub-command, and its own one if it has
    sub-commands (convert huggingface / official)."""
    current = parser
    while True:
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or getattr(argv_namespace, sub.dest, None) not in sub.choices:
            return current
        current = sub.choices[getattr(argv_namespace, sub.dest)]
