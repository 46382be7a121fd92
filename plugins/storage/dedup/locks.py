"""The locks of a chunk store (plugins/storage/dedup/store.py): index/lock, which serialises
index appends and container numbers, and index/pool.lock, held shared by every session
(backup, restore, verify) and exclusively by space reclaim; and what a forked child must do
with the locks its parent's threads held."""

import errno
import fcntl
import os
import threading
import time

from app.errors import ValidationError
from app.formats import private
from plugins.storage.dedup.containers import _OpenContainers
from plugins.storage.dedup.errors import PoolBusy

DEFAULT_SESSION_TIMEOUT = 60.0


def _is_busy(e):
    return e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES)


def _flock_holders(path):
    """[(mode, pid)] of the flocks held on `path` ("READ" or "WRITE"), from /proc/locks;
    None where the system does not list them. Only for messages: never a correctness input."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.readlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = []
    for line in lines:
        fields = line.split()
        # waiting requests are listed as "N: -> FLOCK ..."; they hold nothing yet
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == want:
            holders.append((fields[3], int(fields[4]) if fields[4].isdigit() else None))
    return holders



class PoolLocks:
    """ChunkStore's locks and sessions. Mixed into ChunkStore; uses its _lock_path,
    _pool_lock_path, _mutex and root."""

    def _locked(self):
        return _FileLock(self._lock_path, self._mutex)
    # ------------------------------------------------------------------ sessions

    def session(self, timeout=DEFAULT_SESSION_TIMEOUT, *, poll=0.05, clock=time.monotonic,
                sleep=time.sleep):
        """A PoolSession: a shared hold on the pool that keeps space reclaim out until it is
        closed. Backups, restores and verifications hold one for their whole run (a backup
        from before its first has() until its recipe is committed). Waits up to `timeout`
        seconds (None: without end) while a reclaim runs, then raises PoolBusy. `clock` and
        `sleep` are there for tests."""
        if timeout is not None and (isinstance(timeout, bool)
                                    or not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValidationError(f"session timeout {timeout!r} is not a number of seconds",
                                  hint="Use 0 or more seconds, or None to wait without end.")
        return PoolSession(self, timeout, poll, clock, sleep)

    def _open_pool_lock(self):
        return private.create(self._pool_lock_path, os.O_RDWR)

    def _reclaim_running(self, waited):
        holders = _flock_holders(self._pool_lock_path) or []
        pids = [pid for mode, pid in holders if mode == "WRITE" and pid]
        by = f" (process {', '.join(map(str, pids))})" if pids else ""
        return PoolBusy(
            f"space reclaim is running on the deduplication pool at {self.root}{by}; waited "
            f"{waited:g} s for it to finish",
            pids=pids,
            hint="Reclaim keeps backups, restores and verifications out while it frees "
                 "space; run this again when it is done, or wait longer.")

    def _sessions_present(self):
        holders = _flock_holders(self._pool_lock_path)
        if holders is None:
            count, pids = None, []
            who = "backups/restores are"
        else:
            readers = [pid for mode, pid in holders if mode == "READ"]
            count, pids = len(readers), sorted({p for p in readers if p})
            who = "1 backup/restore is" if count == 1 else f"{count} backups/restores are"
            if count == 0:
                who = "backups/restores are"  # released between our try and our look
        return PoolBusy(
            f"space reclaim cannot start: {who} using the deduplication pool at {self.root}; "
            f"try again when they are done",
            sessions=count, pids=pids,
            hint="Reclaim needs the pool to itself; schedule it when no backups, restores or "
                 "verifications run on this pool.")


class PoolSession:
    """A shared hold on the pool's usage lock (index/pool.lock) until close(). Each session
    has its own open file, so sessions of one process and of many coexist, and a reclaim in
    this process is kept out too. A forked child inherits the hold until it exits."""

    def __init__(self, store, timeout, poll, clock, sleep):
        self.store = store
        self._fd = store._open_pool_lock()
        started = clock()
        try:
            while True:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except OSError as e:
                    if not _is_busy(e):
                        raise
                waited = clock() - started
                if timeout is not None and waited >= timeout:
                    raise store._reclaim_running(round(waited, 1))
                sleep(poll)
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise
        # a reclaim may have rewritten the index since this store last read it: drop what
        # it knew, or has() could still answer yes for a chunk that is gone
        with store._mutex:
            store._refresh()
        self._files = _OpenContainers()

    def get(self, fp, check_fingerprint=True):
        """store.get, reading through containers kept open for the session: no open and close
        per chunk, and the kernel's read-ahead follows a restore through each container.
        Safe because no container is deleted or renumbered while a session holds the pool."""
        if self._fd is None:
            raise ValidationError("this pool session is closed")
        return self.store.get(fp, self._files, check_fingerprint)

    def forked(self):
        """In a child forked from this process, which reads through this session: the
        store's lock and the open containers' are made anew, as another thread may have
        held them at the fork. The containers are opened again as they are read."""
        self.store._mutex = threading.RLock()
        self._files = _OpenContainers()

    @property
    def closed(self):
        return self._fd is None

    def close(self):
        fd, self._fd = self._fd, None
        if fd is not None:
            files = getattr(self, "_files", None)
            if files is not None:
                files.close()
            os.close(fd)  # drops the flock

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass  # interpreter shutdown: the process's exit drops the flock anyway


# A process forked from this one (a restore's streams) gets a copy of every open file, and a
# flock lasts while any copy of its open file is open. The thread that took a store lock is
# not in the child and never releases it there, so the lock would stay taken, for every
# process using the pool, until the child ends. The child therefore closes at once every
# descriptor of a store's lock file: all are known by inode, registered before the first
# lock is taken (a fork may come between another thread's open and its lock). An inode
# number is used again once its file is gone (a pool removed), so a descriptor counts as a
# lock file's only if it also names that file's path: a container or an index file that
# happens to get the number stays open (closing it would fail the child's reads with EBADF).
# (st_dev, st_ino) -> (path, real path) of the store lock files this process opened.
_lock_files = {}
_held_locks = set()  # the _FileLocks held now, whose fd the child forgets
_lock_files_mutex = threading.Lock()


def _register_lock_file(fd, path):
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)
    known = _lock_files.get(key)
    if known is None or known[0] != path:
        # as /proc names an open file: absolute, no symbolic link on the way
        real = os.path.realpath(path)
        with _lock_files_mutex:
            _lock_files[key] = (path, real)


def _is_lock_file(fd, path):
    """Whether descriptor fd is open on the lock file at path (or on one that was there and
    has been removed or replaced since: its flock must be let go all the same)."""
    try:
        name = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return True  # no /proc: the inode alone says so, as nothing better can
    return name == path or name.startswith(path + " (deleted)")


def _close_inherited_locks():
    global _lock_files_mutex
    _lock_files_mutex = threading.Lock()  # another thread may have held it at the fork
    for lock in list(_held_locks):
        lock.fd = None
    _held_locks.clear()
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(3, 1024)  # no /proc: the descriptors most processes stay below
    for fd in fds:
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        known = _lock_files.get((st.st_dev, st.st_ino))
        if known is not None and _is_lock_file(fd, known[1]):
            try:
                os.close(fd)
            except OSError:
                pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_inherited_locks)


class _FileLock:
    """The store's thread mutex plus an exclusive flock on the lock file, opened anew each time
    because flock does not exclude holders of the same open file."""

    def __init__(self, path, mutex):
        self.path = path
        self.mutex = mutex
        self.fd = None

    def __enter__(self):
        self.mutex.acquire()
        try:
            _held_locks.add(self)
            self.fd = private.create(self.path, os.O_RDWR)
            _register_lock_file(self.fd, self.path)  # the lock file may have been made anew
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            self._close()
            self.mutex.release()
            raise
        return self

    def __exit__(self, *exc):
        try:
            self._close()  # closing drops the flock
        finally:
            self.mutex.release()

    def _close(self):
        _held_locks.discard(self)
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
        return False
