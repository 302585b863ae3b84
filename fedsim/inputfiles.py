"""Every file fedsim reads as input goes through here: it must be a regular file (a pipe only where the
caller allows one: a scenario given as ``<(...)``) no larger than its kind's limit, so no input (a device
such as ``/dev/zero``, a FIFO nobody writes, a sparse file of a terabyte) can take the machine's memory or
hang a run.  A refusal is one :class:`~fedsim.errors.ConfigError` naming the field, the file, what it is and
what is allowed.

The limits, far above any real input of each kind and far below what would take a machine:

=================  ==========  =====================================================================
kind               limit       read by
=================  ==========  =====================================================================
scenario YAML      4 MiB       ``fedsim run/show/sweep/models PATH`` (also a pipe, read at most the limit)
device profile     1 MiB       ``devices.mix[*].profile``, ``server.profile``, ``fedsim profiles NAME``
CSV table          64 MiB      ``availability.path``, ``channel.positions.path``
checkpoint         4 GiB       ``checkpoints/v*.pt`` and ``final_model.pt`` read by ``fedsim check``
dataset file       16 GiB      files of ``data.root`` (IDX, CIFAR batches, SVHN, FEMNIST JSON, CINIC npz)
=================  ==========  =====================================================================
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from fedsim.errors import ConfigError

MiB = 2**20
GiB = 2**30
LIMIT_SCENARIO = 4 * MiB
LIMIT_PROFILE = 1 * MiB
LIMIT_TABLE = 64 * MiB
LIMIT_CHECKPOINT = 4 * GiB
LIMIT_DATASET = 16 * GiB


def size_text(n: int) -> str:
    """A byte count as a person reads it (``4 MiB``, ``1.5 GiB``, ``812 bytes``)."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:,} bytes"


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path quoted for an error line, cut to 150 characters (a path may be any length)."""
    text = str(path)
    return repr(text) if len(text) <= 150 else repr(text[:150]) + f"…({len(text):,} characters)"


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a file"), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a pipe (FIFO)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _allowed(what: str, limit: int, pipe_ok: bool) -> str:
    return f"allowed: a regular {what}{' or a pipe' if pipe_ok else ''} of at most {size_text(limit)}"


def check_input_file(path: str | os.PathLike[str], field: str, what: str, limit: int, *,
                     pipe_ok: bool = False) -> os.stat_result:
    """The ``stat`` of input ``path`` once it is known to be a regular file (or, with ``pipe_ok``, a pipe)
    of at most ``limit`` bytes; else one ConfigError.  Only metadata is read: a device is refused at once.
    For readers that open the file themselves (``torch.load``, ``np.load``)."""
    shown = shown_path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(field, f"{what} {shown} does not exist") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path; OSError: name too long, no access
        raise ConfigError(field, f"cannot read {what} {shown}: {getattr(exc, 'strerror', None) or exc}") from None
    if stat.S_ISREG(st.st_mode):
        if st.st_size > limit:
            raise ConfigError(field, f"{what} {shown} is {size_text(st.st_size)} ({_allowed(what, limit, pipe_ok)})")
        return st
    if pipe_ok and stat.S_ISFIFO(st.st_mode):
        return st
    raise ConfigError(field, f"{shown} is {_kind(st.st_mode)}, not a file ({_allowed(what, limit, pipe_ok)})")


def read_input(path: str | os.PathLike[str], field: str, what: str, limit: int, *, pipe_ok: bool = False) -> bytes:
    """The bytes of input ``path``, checked by :func:`check_input_file` before it is opened and again on the
    open handle (the name may have been replaced in between), and read at most ``limit`` + 1 bytes: a file
    or pipe longer than ``limit`` is refused, never read to its end."""
    check_input_file(path, field, what, limit, pipe_ok=pipe_ok)
    shown = shown_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not (stat.S_ISREG(mode) or pipe_ok and stat.S_ISFIFO(mode)):
                raise ConfigError(field, f"{shown} is {_kind(mode)}, not a file ({_allowed(what, limit, pipe_ok)})")
            data = fh.read(limit + 1)
    except ConfigError:
        raise
    except (OSError, ValueError) as exc:
        raise ConfigError(field, f"cannot read {what} {shown}: {getattr(exc, 'strerror', None) or exc}") from None
    if len(data) > limit:
        raise ConfigError(field, f"{what} {shown} holds more than {size_text(limit)} "
                          f"({_allowed(what, limit, pipe_ok)})")
    return data


def check_given_path(path: object, field: str, what: str, limit: int) -> None:
    """At load time, a path a scenario field names: refused at once when it exists and is not a regular file
    of at most ``limit`` bytes (a device, a FIFO, a folder, too large).  A path that does not exist (yet) is
    left to the reader, which says so when the run needs the file."""
    if not isinstance(path, str) or not path.strip() or "\x00" in path:
        return
    try:
        if not os.path.exists(path):
            return
    except (OSError, ValueError):
        return
    check_input_file(path, field, what, limit)


#: The longest name of one file or folder most file systems hold (bytes).
NAME_MAX = 255


def check_writable(out: str | os.PathLike[str], field: str) -> None:
    """Refuse, before anything runs or is printed, an output folder the file system cannot hold: a name
    longer than :data:`NAME_MAX` bytes, a file where the folder (or one above it) would be, or a place where
    nothing can be created (no permission, a read-only file system).  The test is real: a folder is created
    in the nearest existing one and removed at once (permission bits alone do not say what root, a
    read-only mount or an ACL allows)."""
    import tempfile

    path = Path(out)
    for part in path.parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise ConfigError(field, f"a folder name of {len(part):,} characters in {shown_path(path)} (allowed: names "
                              f"of at most {NAME_MAX} bytes, the file system's limit)")
    probe = path
    while True:
        try:
            st = os.stat(probe)
            break
        except (FileNotFoundError, NotADirectoryError):  # not there yet, or below a file: look further up
            if probe.parent == probe:
                return
            probe = probe.parent
        except (OSError, ValueError) as exc:
            raise ConfigError(field, f"cannot use {shown_path(path)}: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, f"{shown_path(probe)} is {_kind(st.st_mode)}, not a folder (give a new or empty folder)")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fedsim-write-test-", dir=probe))
    except OSError as exc:
        raise ConfigError(field, f"cannot write in {shown_path(probe)}: {exc.strerror} (allowed: a folder fedsim can "
                          "write in)") from None
