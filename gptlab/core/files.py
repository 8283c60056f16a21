"""Atomic, non-destructive file writing: write to a temporary name beside the target, then rename; output checks
that really write (root passes every os.access check); one writer at a time through an exclusive lock."""
import contextlib
import errno
import json
import os
import shlex
import shutil
import socket
import stat
import sys
import tempfile
import time

from gptlab.core.errors import UserError

_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # no room: the fix is space, not another permission


def check_writable(path, overwrite=False):
    """Refuse to replace an existing file unless overwrite is set, and a path whose folder cannot be made or
    written in (probed by writing there; call before doing expensive work)."""
    _refuse_existing(path, overwrite)
    check_folder_creatable(os.path.dirname(os.path.abspath(path)))


def check_folder_creatable(folder):
    """The folder exists or can be made, and a file can be written there: a one-byte file is created and removed
    in the folder, or in its nearest existing parent when it does not exist yet. os.access is not enough (it says
    yes to root even in /sys), and a full disk only shows when something is written. Call before expensive work
    so a bad output path fails at once; any failure is one UserError naming the folder and the fix."""
    existing = _nearest_existing_folder(folder)
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=existing)
        try:
            os.write(fd, b"\n")
        finally:
            os.close(fd)
            os.remove(probe)
    except OSError as err:
        raise UserError(f"cannot write in {existing} ({err.strerror or err}); "
                        f"{write_fix(err)}") from None


def write_fix(err):
    """The fix to suggest for an OSError from writing: space when there is no room, else another path."""
    if getattr(err, "errno", None) in _FULL_ERRNOS:
        return "free some space there, or choose another output path"
    return "choose another output path"


def _nearest_existing_folder(folder):
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise UserError(f"cannot use folder {folder}: {existing} is a file, not a folder; choose another output path")
    return existing


def _refuse_existing(path, overwrite):
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder; give the path of a file to write")
    if os.path.exists(path) and not overwrite:
        raise UserError(f"{path} already exists; pass --overwrite to replace it, or choose another name")


@contextlib.contextmanager
def atomic_write(path, mode="wb", overwrite=False):
    """Yield a file object for a new temporary file beside `path`; on success rename it to `path`, on any error
    remove it.

    A reader never sees a half-written file under the final name, and an existing file is only replaced when
    overwrite=True. The temporary name (`NAME.tmp.<pid>.<random>`) is unpredictable and created with O_EXCL, so a
    file or symlink planted in the folder is never followed or overwritten; it gets the permissions a plain
    `open` would give (0666 less the umask). A folder that cannot be made or written in is a UserError; errors
    while writing (a full disk) propagate as OSError for the caller to word, with nothing left behind.
    """
    _refuse_existing(path, overwrite)
    folder = os.path.dirname(os.path.abspath(path))
    _nearest_existing_folder(folder)
    try:  # creating the temporary file is this write's own check of the folder
        os.makedirs(folder, exist_ok=True)
        fd, tmp_path = tempfile.mkstemp(prefix=f"{os.path.basename(path)}.tmp.{os.getpid()}.", dir=folder)
    except OSError as err:
        raise UserError(f"cannot write in {folder} ({err.strerror or err}); {write_fix(err)}") from None
    try:
        os.fchmod(fd, umasked(0o666))
        tmp_file = os.fdopen(fd, mode)
    except BaseException:
        os.close(fd)
        os.remove(tmp_path)
        raise
    try:
        with tmp_file as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp_path)
        raise


def _umask():
    """The process's umask, read without changing it (os.umask can only be read by setting it, which races with
    other threads creating files); the os.umask round trip where /proc is missing."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umasked(mode):
    """`mode` less the process's umask: what open() (0666) or mkdir (0777) would give a new file or folder."""
    return mode & ~_umask()


def atomic_write_text(path, text, overwrite=False):
    with atomic_write(path, "w", overwrite=overwrite) as f:
        f.write(text)


# ---- one writer at a time

_HELD_FOR_A_MOMENT_S = 0.2  # a reader probing a lock (lock_holder) holds it for microseconds: that is no holder


@contextlib.contextmanager
def exclusive_lock(lock_path, what, holder_extra=None, held_hint=None):
    """Hold an exclusive lock on `lock_path` (created, with its folder, if missing) for the `with` block, so only
    one process at a time writes `what` (e.g. "tokenizer tokenizers/t.pkl"). The file records the holder (pid,
    host, command line, start time, and `holder_extra`); a second process gets, at once, a UserError naming that
    holder (and `held_hint`, when given, after it).

    The lock is filelock's flock(2) lock (no soft fallback: a lock that outlives a crash is what it avoids): the
    OS drops it when the holder exits or is killed, so no stale lock survives a crash (the file may stay; it is
    removed on a normal exit), and filelock closes a forked child's copy, so a child that lives on does not keep
    it. Yields the path."""
    from filelock import Timeout, UnixFileLock  # (~0.1 s: only where a lock is taken)

    lock = UnixFileLock(lock_path, timeout=_HELD_FOR_A_MOMENT_S, poll_interval=0.02, fallback_to_soft=False,
                        on_acquired=lambda fd: _write_holder(fd, holder_extra))
    for attempt in range(100):
        try:
            os.makedirs(os.path.dirname(os.path.abspath(lock_path)), exist_ok=True)
        except OSError as err:
            raise UserError(f"cannot create the folder of {lock_path} ({err.strerror or err}); "
                            f"{write_fix(err)}") from None
        try:
            lock.acquire()
            break
        except Timeout:
            holder = lock_holder(lock_path)
            if holder is None and attempt < 99:  # its holder ended as we looked: take it now
                continue
            hint = f" ({held_hint})" if held_hint else ""
            raise UserError(f"{what} is being written by {describe_holder(holder)}; wait for it to "
                            f"finish or stop it{hint}") from None
        except FileNotFoundError:  # another writer removed the folder it had made, empty, as we made ours
            if attempt == 99:
                raise UserError(f"cannot create the lock file {lock_path}: its folder keeps disappearing") from None
        except OSError as err:
            raise UserError(f"cannot create the lock file {lock_path} ({err.strerror or err}); "
                            f"{write_fix(err)}") from None
    try:
        yield lock_path
    finally:
        with contextlib.suppress(OSError):
            os.remove(lock_path)  # while still held: a waiting process then retries on a fresh file (filelock does)
        lock.release()


def lock_holder(lock_path, wait_s=1.0):
    """The holder of the exclusive_lock at `lock_path` as a dict (pid, host, command, since, and its extra
    fields), or None when nobody holds it (no file, or a file left by a holder that has ended). A holder that
    ends while we look is no holder; one still holding after `wait_s` with its details unwritten gives {}.
    Reads only: the file is opened read-only (another user's lock is probed all the same) and locked for an
    instant."""
    from filelock import lock_descriptor, unlock_descriptor

    deadline = time.monotonic() + wait_s
    while True:
        try:
            fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            for attempt in range(3):  # another reader's probe holds it for an instant: that is no holder
                if lock_descriptor(fd, blocking=False):
                    unlock_descriptor(fd)
                    if _same_file(fd, lock_path):
                        return None
                    break  # the file we opened was replaced (its holder ended, a new one began): look again
                time.sleep(0.02)
            else:
                holder = _parse_holder(os.pread(fd, 1 << 16, 0))  # from the file we opened, gone or not
                if holder:
                    return holder
        except OSError:
            pass
        finally:
            os.close(fd)
        if time.monotonic() > deadline:
            return {}
        time.sleep(0.05)  # the holder writes its details right after taking the lock


def _same_file(fd, path):
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
    except OSError:
        return True  # gone: nobody holds it


def _write_holder(fd, extra=None):
    holder = {"pid": os.getpid(), "host": socket.gethostname(),
              "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
              "since": time.strftime("%Y-%m-%d %H:%M:%S %Z"), **(extra or {})}
    data = (json.dumps(holder) + "\n").encode()
    with contextlib.suppress(OSError):  # the lock holds without them (a full disk, a read-only lock file)
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)


def _parse_holder(data):
    """The holder recorded in a lock file's bytes as a dict, or {} while they are not complete."""
    try:
        holder = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return {}
    if isinstance(holder, dict) and all(k in holder for k in ("pid", "host", "command", "since")):
        return holder
    return {}


def describe_holder(holder):
    """'pid N on HOST (`command`), since TIME', or a plainer phrase when the details are not recorded."""
    if not holder:
        return "another process (its details are not recorded)"
    command = " ".join(str(holder["command"]).split())  # on one line, and not too long
    command = command if len(command) <= 200 else command[:197] + "..."
    return f"pid {holder['pid']} on {holder['host']} (`{command}`), since {holder['since']}"


def read_json_file(path, max_bytes):
    """(value, None) for the JSON in the regular file at `path` (symlinks followed), read within max_bytes; else
    (None, why): "is not a regular file" (missing, a folder, a FIFO, a device such as /dev/zero), "is too large
    (...)" or "is unreadable (...)" (not UTF-8 JSON, or nested deeper than Python's stack)."""
    try:
        st = os.stat(path)
    except OSError:
        return None, "is not a regular file"
    if not stat.S_ISREG(st.st_mode):
        return None, "is not a regular file"
    if st.st_size > max_bytes:
        return None, f"is too large ({st.st_size:,} bytes; at most {max_bytes:,} are read)"
    try:
        with open(path, "rb") as f:
            return json.loads(f.read(max_bytes + 1).decode("utf-8")), None
    except (OSError, ValueError, RecursionError) as err:  # RecursionError: nesting deeper than Python's stack
        return None, f"is unreadable ({type(err).__name__}: {str(err)[:200]})"


def check_output_dir(path, overwrite=False, inputs=()):
    """A folder to write (by atomic_output_dir): refuse an existing one unless overwrite, a file, a symbolic link
    whatever it points at (the swap would replace the link, not the folder it names), or a place it cannot be made
    (call before expensive work). With overwrite, a folder that holds the current folder, or any of `inputs` (the
    files the command reads), is refused too: replacing it would delete them."""
    if os.path.islink(path):
        raise UserError(f"{path} is a symbolic link (to {os.readlink(path)}); give the folder itself, or a new path")
    if os.path.exists(path) and not os.path.isdir(path):
        raise UserError(f"{path} is a file; give the path of a folder to write")
    if os.path.exists(path) and not overwrite:
        raise UserError(f"{path} already exists; pass --overwrite to replace it, or choose another folder")
    if os.path.isdir(path):
        folder = os.path.realpath(path)
        for inside, what in [(os.getcwd(), "the current folder")] + [(p, p) for p in inputs]:
            if _holds(folder, os.path.realpath(inside)):
                raise UserError(f"{path} is or holds {what}; --overwrite would delete it with the folder: choose "
                                "another folder to write")
    check_folder_creatable(os.path.dirname(os.path.abspath(path)))


def _holds(folder, path):
    return os.path.commonpath([folder, path]) == folder


@contextlib.contextmanager
def atomic_output_dir(path, overwrite=False, inputs=()):
    """Yield an empty folder `path.tmp.<random>` beside path to fill; on success it becomes `path` (an existing
    `path` is only replaced when overwrite=True), on any error it is removed, and an existing `path` is left as it
    was, under its name, whatever step failed. A reader never sees a half-written folder. The temporary names are
    made by mkdtemp (unpredictable, never an existing file or a planted link); check_output_dir refuses a symbolic
    link as path. The folder gets the permissions `mkdir` would give (0777 less the umask), not mkdtemp's 0700."""
    check_output_dir(path, overwrite, inputs)
    parent, name = os.path.split(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)  # OUT_DIR's parents, as `mkdir -p` would (the temporary folder goes beside)
    tmp_path = tempfile.mkdtemp(prefix=f"{name}.tmp.", dir=parent)
    try:
        os.chmod(tmp_path, umasked(0o777))
        yield tmp_path
        _swap_in(tmp_path, os.path.join(parent, name))
    except BaseException:
        shutil.rmtree(tmp_path, ignore_errors=True)
        raise


def _swap_in(tmp_path, path):
    """Rename the complete folder tmp_path to path; an existing path goes only once the new one is in place, and
    comes back under its name if any step fails (or is interrupted)."""
    if not os.path.exists(path):
        os.replace(tmp_path, path)
        return
    parent, name = os.path.split(path)
    old_path = tempfile.mkdtemp(prefix=f"{name}.old.", dir=parent)
    try:
        os.replace(path, old_path)  # a folder onto the empty one mkdtemp made
    except BaseException:
        os.rmdir(old_path)
        raise
    try:
        os.replace(tmp_path, path)
    except BaseException:
        os.replace(old_path, path)
        raise
    shutil.rmtree(old_path, ignore_errors=True)
