"""The error users see: bad files, flags or values, with a message that names the file, line or flag."""


class UserError(ValueError):
    """Bad input from a person (file, flag, field); the CLI prints it without a traceback."""
