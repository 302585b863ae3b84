"""Errors that reach the user as one clear line (the CLI prints them and exits with code 2)."""
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
    """The process got SIGTERM: handled like an interrupt (summary written, ``status: interrupted``)."""
