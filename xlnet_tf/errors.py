"""The error users see: bad files, flags or values, with a message that names the file, line or flag.

One message serves two readers. Words that name an option are a `Spelling`: `str(error)` writes them as a Python
caller passes them (``skip_bad_rows=True``), `error.for_command(flags)` as the command line does
(``--skip-bad-rows``), so that a message never suggests an option its reader does not have.
"""

import re

_FLAG = re.compile(r"--[A-Za-z0-9][A-Za-z0-9_-]*")
_HINTS = {}  # argument words -> their Spelling: re-spells a message that lost its parts (raised in a Beam worker)


class Spelling:
    """Words of an error message that name options: `argument` for Python callers, `flag` for the command line
    (None: no flag). A `hint` (advice to use an option) is left out of a command's message when that command lacks
    a flag it names; other words fall back to `argument`."""

    def __init__(self, argument, flag=None, hint=True):
        self.argument, self.flag, self.hint = argument, flag, hint
        if hint:
            _HINTS[argument] = self

    def render(self, flags=None):
        """These words for Python (`flags` None) or for a command whose flags are `flags`."""
        if flags is None:
            return self.argument
        if self.flag is not None and all(name in flags for name in _FLAG.findall(self.flag)):
            return self.flag
        return "" if self.hint else self.argument

    def __str__(self):
        return self.argument


class UserError(ValueError):
    """Bad input from a person (file, flag, field); the CLI prints it without a traceback.

    `UserError(*parts)`: strings and `Spelling`s, joined (``UserError(f"{path}, line 3: bad", SKIP_HINT, ".")``).
    """

    def __init__(self, *parts):
        self.parts = parts
        super().__init__("".join(str(part) for part in parts))

    def for_command(self, flags):
        """The message for a command whose flags (option strings) are `flags`. A message that came as text (from
        another process) has the hints of the modules loaded here re-spelled."""
        if not any(isinstance(part, Spelling) for part in getattr(self, "parts", ())):
            text = str(self)
            for argument, hint in _HINTS.items():
                text = text.replace(argument, hint.render(flags))
            return text
        return "".join(part.render(flags) if isinstance(part, Spelling) else str(part) for part in self.parts)
