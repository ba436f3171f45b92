"""One error hierarchy for everything a user can run, so the CLI can answer each kind properly.

Why three kinds: bad input is the user's to fix (exit 2, one line naming the field and what is
allowed); a runtime failure is the machine's or the lab's (exit 1, one line and where the log
is); anything else is a bug in zlab and keeps its traceback. Deliberately *not* ValueError
subclasses: a programming error must never be mistaken for bad input.
"""

from __future__ import annotations


class ZlabError(Exception):
    """Base of every error zlab raises on purpose."""

    exit_code = 1


class UserInputError(ZlabError):
    """A spec, option, file or value the user gave cannot be used. The message names the field
    and the allowed values."""

    exit_code = 2


class RuntimeFailure(ZlabError):
    """The lab failed while doing what was asked (a command, a daemon, a timeout)."""

    exit_code = 1

    def __init__(self, message: str, log_path: str | None = None):
        super().__init__(message)
        self.log_path = log_path

    def __str__(self) -> str:
        base = super().__str__()
        return f"{base} (log: {self.log_path})" if self.log_path else base


class Terminated(Exception):
    """SIGTERM while a fabric is up (zlab destroy sends it): tear down, then stop. Not a ZlabError:
    it is how a user stops a run, not a failure; the CLI answers it with one line and exit 143."""
