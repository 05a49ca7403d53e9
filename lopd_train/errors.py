"""Mistakes about a run that its user can fix (a setting, a file, a folder in use, a full disk), each raised
with its remedy. Why a marker class: ``lopd-train`` shows these as one line and exits 2, while any other
exception stays a traceback (a bug must be visible as one)."""

from __future__ import annotations


class RunError(Exception):
    """Base of the user's mistakes about a run; the command line prints the message alone."""


class RunSettingError(RunError, ValueError):
    """A setting the run cannot go on with (an env id or env kwargs the env refuses, a bank of the other mode)."""


class RunInputMissing(RunError, FileNotFoundError):
    """A file or folder the settings name that is not there."""


class RunExistsError(RunError, FileExistsError):
    """A new run in a folder that already holds one."""


class RunMismatchError(RunError, ValueError):
    """``--resume`` with settings or data that are not the run's."""


class RunLockedError(RunError, RuntimeError):
    """Another live process works in the same folder."""


class CheckpointError(RunError, ValueError):
    """A checkpoint that is not read: of the old pickle format (with how to convert it), torn, or missing."""


class NoSpaceError(RunError, OSError):
    """The run folder's file system is full; raised as ``NoSpaceError(errno.ENOSPC, message)``."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()
