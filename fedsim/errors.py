"""Errors that reach the user as one clear line (the CLI prints them and exits with code 2; an error raised in
the user's own code, :class:`UserCodeError`, with code 4)."""
from __future__ import annotations

import re

#: A run of characters without a space longer than this (a value, a path) is cut in an error line.
MAX_WORD = 200
#: An error line longer than this keeps its head and its tail (where "allowed: ..." is) around a cut.
MAX_LINE = 2000


def one_line(text: object) -> str:
    """An error message as one line of bounded length: line breaks become spaces, any word longer than
    :data:`MAX_WORD` characters (a 10 MB value echoed back) is cut to its start and ``…(N characters)``, and a
    line still longer than :data:`MAX_LINE` keeps its start and end around ``…(N characters)…``."""
    line = " ".join(str(text).splitlines())
    line = re.sub(r"\S{%d,}" % (MAX_WORD + 1), lambda m: f"{m.group(0)[:MAX_WORD]}…({len(m.group(0)):,} characters)",
                  line)
    if len(line) > MAX_LINE:
        line = f"{line[:MAX_LINE - 400]}…({len(line):,} characters)…{line[-300:]}"
    return line


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

    def __init__(self, where: str, location: str | None = None, cause: BaseException | None = None) -> None:
        if location is None and cause is None:  # re-created from its own text (SimPy re-raising a process's error)
            self.where, self.location, self.cause = "", "", None
            super().__init__(where)
            return
        self.where, self.location, self.cause = where, location, cause
        text = one_line(" ".join(str(cause).split())) or "(no message)"
        super().__init__(f"{where} ({location}): {type(cause).__name__}: {text[:300]}")


class UserDecisionError(Exception):
    """A decision the user's algorithm returned to a loop shape that cannot be acted on (a selection naming a
    client twice, a weight per update missing, a quorum above the number of clients): the message names the
    method and the bad value.  Reported as an error in the user's code (one line, exit :attr:`exit_code`, 4),
    not as bad input or an internal error; ``fedsim.algorithms.decisions`` raises it."""

    exit_code = 4
