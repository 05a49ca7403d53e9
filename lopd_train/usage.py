"""How every lopd-train command reports a user's mistake: one line on stderr and exit status 2, where a bug stays a
traceback (shared by ``lopd_train.cli`` and ``lopd_train.export``)."""

from __future__ import annotations

import argparse
import functools
import sys


class UsageError(SystemExit):
    """A user's mistake on the command line (a bad option or value, a missing file, a locked folder): the
    command prints its one-line message and exits 2. ``str()`` is the message, ``code`` 2. Anything else that
    goes wrong stays a traceback: a bug must show where it is."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


def one_line_errors(main):
    """The command's user errors (:class:`UsageError`) printed as their one line on stderr, exit status 2."""
    @functools.wraps(main)
    def run(argv=None):
        try:
            return main(argv)
        except UsageError as exc:
            print(str(exc), file=sys.stderr)
            raise
    return run


def one_line_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """argparse's own errors (unknown option, bad choice, missing value) as one line, not usage + error."""
    def error(message: str):
        raise UsageError(f"{parser.prog}: error: {message} (see {parser.prog} --help)")
    parser.error = error
    return parser
