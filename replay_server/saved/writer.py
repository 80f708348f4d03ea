"""How commands write files: whole, then renamed (`written_whole`: convert's JSONL, the
index file, run's report, compare's page), or by durable appends (`RecordWriter`: the
recorder's records); and whether they can (`writable`), asked before a command does any
work, so that a mistyped output path costs one line, not a load or a harness's run.

Every file a command writes gets the usual mode of a new file, 0666 less the umask, as
any tool's output does: a converted run or an index file mounted into a container is read
by the container's user.

The recorder writes every exchange it saves through `RecordWriter`, before the client sees
the end of the answer: an exchange a client saw complete survives a crash, and concurrent
exchanges never interleave within a line.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import os
import secrets
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import LoadError

USUAL_MODE = 0o666  # less the umask, which the system applies


def writable(out: Path, option: str, *, append: bool = False) -> None:
    """Raise LoadError, naming `out`, the option that gave it and why, if a command could
    not write `out`: the way it will, by creating a file beside it (a file written whole is
    renamed over `out`, so only its folder must let it) or, with `append`, by opening an
    existing `out` to append to it. Creates nothing that stays. An output is a regular
    file (`not_a_file`)."""
    if (node := not_a_file(out)) is not None:
        raise LoadError(str(out), None, f"cannot write the {option} file: it is {node}, "
                        "not a regular file: name a file")
    try:
        if out.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(out))
        if append and out.exists():
            os.close(os.open(out, os.O_WRONLY | os.O_APPEND))
        else:
            os.unlink(_new_beside(out.resolve()))
    except OSError as error:
        raise LoadError(str(out), None, f"cannot write the {option} file: "
                        f"{_why_not(out, error)}") from None


def not_a_file(out: Path) -> str | None:
    """What `out` is (symlinks followed) when it is there and is neither a regular file nor
    a directory: a new file renamed over a pipe or a device (`/dev/null`, `/dev/stdout`)
    would replace the node itself (as root, /dev/null too), and appending to a pipe waits
    for a reader for ever. None otherwise."""
    try:
        mode = os.stat(out).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        return "a pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket" if stat.S_ISSOCK(mode) else None


def _why_not(out: Path, error: OSError) -> str:
    folder = out.parent
    if error.errno in (errno.EACCES, errno.EPERM):
        return "no permission to write it" if str(error.filename) == str(out) else \
            f"no permission to write in {folder}"
    return {errno.ENOENT: f"no such directory: {folder}",
            errno.ENOTDIR: f"{folder} is not a directory",
            errno.EISDIR: "it is a directory: name a file"}.get(
                error.errno or 0, error.strerror or str(error))


def _new_beside(target: Path) -> Path:
    """A new empty file, hidden, beside `target`, with the usual mode."""
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, USUAL_MODE))
    return tmp


@contextmanager
def written_whole(out: Path) -> Iterator[Path]:
    """A new empty file beside `out` to write, renamed to `out` once the block ends, and
    removed if it raises: `out` is the old file or the new one whole, never a part of it.
    A symlink `out` keeps pointing where it did: the file it points to is replaced; a pipe
    or a device is never replaced (`not_a_file`). The new file is locked (flock, exclusive)
    until renamed: what cleans a folder of files left by killed writers (`replay-server
    cache --clear`) leaves one being written (`being_written`)."""
    target = out.resolve()
    if (node := not_a_file(target)) is not None:
        raise OSError(errno.EINVAL, f"{out} is {node}, not a regular file", str(out))
    tmp = _new_beside(target)
    lock = os.open(tmp, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # (a filesystem without locks: written unlocked)
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        os.close(lock)


def being_written(path: Path) -> bool:
    """Whether `written_whole` is writing the file `path` now (a process holds its lock;
    one killed holds none)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # renamed or removed meanwhile
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:  # a filesystem without locks: cannot be told
        return False
    finally:
        os.close(fd)


class RecordWriter:
    """Appends whole lines to one file, fsynced, with group commit across requests.

    One writer holds the file (a lock: a second recorder on it is refused), so that lines
    never interleave; a line goes to disk before the client sees the end of its answer, so
    that what a client saw survives a crash; the lines that arrive while one write is on
    its way go together in the next, so that a busy recorder does not fsync per line."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, USUAL_MODE)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise LoadError(str(path), None, "another recorder is writing this file") from None
        self.set_aside = self._set_aside_torn_tail()
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    def _set_aside_torn_tail(self) -> Path | None:
        """A crash can leave a last line with no newline: that exchange was never
        acknowledged. Move it to a side file (nothing is lost) so appends start clean."""
        size = os.fstat(self.fd).st_size
        if size == 0:
            return None
        with self.path.open("rb") as f:
            data = f.read()
        if data.endswith(b"\n"):
            return None
        keep = data.rfind(b"\n") + 1
        aside = self.path.with_name(f"{self.path.name}.torn-{int(time.time())}")
        aside.write_bytes(data[keep:])
        os.ftruncate(self.fd, keep)
        os.fsync(self.fd)
        return aside

    async def append(self, data: bytes) -> None:
        """Returns once `data` is on disk."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((data, done))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        await done

    async def _flush(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await asyncio.to_thread(self._write, b"".join(d for d, _ in batch))
            except OSError as e:
                for _, done in batch:
                    done.set_exception(e)
            else:
                for _, done in batch:
                    done.set_result(None)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        os.fsync(self.fd)

    def close(self) -> None:
        os.close(self.fd)
