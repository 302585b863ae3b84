"""Errors that reach the user as one clear line (the CLI prints them and exits with code 2; an error raised in
the user's own code, :class:`UserCodeError`, with code 4)."""
from __future__ import annotations


class FedsimError(Exception):
    """Base class: an error whose message alone tells the user what is wrong."""


class ConfigError(FedsimError, ValueError):
    """A scenario field, option or input file is wrong.

    The message names the field, the bad value and what is allowed, e.g.
    ``data.name: unknown dataset 'foo' (allowed: digits, mnist1d, synthetic)``.
    """

    def __init__(self, field: str, message: str | None = None) -> None:
        if message is None:  # re-created from its own text (copy, pickle, an event re-raising it)
            field, message = "", field
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


class DivergenceError(FedsimError, RuntimeError):
    """Training produced a non-finite loss; the run stops but keeps what it wrote."""


class Terminated(KeyboardInterrupt):
    """The process got SIGTERM (or SIGHUP, a closed terminal or dropped ssh session): handled like an
    interrupt (summary written, ``status: interrupted``); ``signame`` says which."""

    def __init__(self, signame: str = "SIGTERM") -> None:
        super().__init__(signame)
        self.signame = signame


class UserCodeError(Exception):
    """An exception raised inside the user's own code (an algorithm, model, dataset or hook named in the
    scenario), not in fedsim's: where it was raised (``module:qualname`` and ``file:line``) and the exception.
    ``fedsim.components.user_code_error`` finds it from a traceback; the CLI prints one line and exits with
    :attr:`exit_code` (4), distinct from bad input (2) and an internal error (3)."""

    exit_code = 4

    def __init__(self, where: str, location: str, cause: BaseException) -> None:
        self.where, self.location, self.cause = where, location, cause
        text = " ".join(str(cause).split()) or "(no message)"
        super().__init__(f"{where} ({location}): {type(cause).__name__}: {text[:300]}")
