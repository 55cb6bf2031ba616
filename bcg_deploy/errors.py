"""User-facing errors: one line naming the thing and what was expected; the CLI exits non-zero."""


class BcgdError(Exception):
    """Bad user input (file, metadata, value). The CLI prints ``error: <message>`` and exits 2."""
