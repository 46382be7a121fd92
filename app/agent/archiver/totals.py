"""What the selections hold, in files and bytes, known before the copy ends: counted beside it
(Totals), or taken from a file list made beforehand (Counted)."""

import os
import signal
import stat
import threading
import warnings


class Counted:
    """Totals known before the copy starts (from a file list)."""

    def __init__(self, result):
        self.result = result
        self.stop = False


# Counting starts this long after the copy: a second walk of the tree beside the copy's own
# competes with it for the interpreter, which made an unchanged full of 20,000 files 20%
# slower, while a backup that ends within a second needs no estimate of its time left.
COUNT_AFTER = 1.0


class Totals(threading.Thread):
    """Counts what the selections hold, beside the copy, so that percent done and an ETA can
    be shown long before the copy is over.

    The count runs in a child process where the system allows one: in this process it is a
    second walk competing with the copy for the interpreter, which made a full backup of
    many small files a quarter slower. The thread only waits for the child's answer."""

    def __init__(self, roots, excludes=frozenset(), names=None, after=COUNT_AFTER):
        super().__init__(name="cairn-totals", daemon=True)
        self.after = after
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._child = None
        self.roots = roots
        self.excludes = excludes
        # the walk's name globs (walk.NamePatterns): their regex, not their count
        self.names = names.regex if names is not None else None
        self.result = None
        self.counted_in = None  # "child" or "thread", once counted

    @property
    def stop(self):
        return self._stopped.is_set()

    @stop.setter
    def stop(self, value):
        if value:
            self._stopped.set()
            with self._lock:
                if self._child is not None:
                    _kill(self._child)

    def run(self):
        if self._stopped.wait(self.after):
            return
        result = self._count_in_child()
        if result is _NO_CHILD:
            result, self.counted_in = self.count(), "thread"
        elif result is not None:
            self.counted_in = "child"
        if result is not None and not self.stop:
            self.result = result

    def _count_in_child(self):
        """The count made by a child process: its result, None when it failed or was
        stopped, _NO_CHILD when no child could be started."""
        if not hasattr(os, "fork"):
            return _NO_CHILD
        r, w = os.pipe()
        with self._lock:
            if self.stop:
                os.close(r)
                os.close(w)
                return None
            try:
                with warnings.catch_warnings():
                    # 3.12 on warns of fork() in a process with threads: the child runs
                    # only the count, and nothing of the other threads' state
                    warnings.simplefilter("ignore", DeprecationWarning)
                    pid = os.fork()
            except OSError:
                os.close(r)
                os.close(w)
                return _NO_CHILD
            if pid == 0:  # pragma: no cover - the child; its answer is what is tested
                _child(self, w)
            self._child = pid
        os.close(w)
        try:
            answer = b""
            while True:
                got = os.read(r, 256)
                if not got:
                    break
                answer += got
        finally:
            os.close(r)
            with self._lock:
                self._child = None
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        try:
            files, nbytes = map(int, answer.split())
        except ValueError:
            return None
        return {"files": files, "bytes": nbytes}

    def count(self):
        """{"files", "bytes"} of the selections, or None when stopped."""
        files = 0
        nbytes = 0
        seen = set()
        stack = []
        for r in self.roots:
            try:
                st = os.lstat(r)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                stack.append(r)
            elif not stat.S_ISSOCK(st.st_mode):
                files += 1
                if stat.S_ISREG(st.st_mode):
                    nbytes += min(st.st_size, st.st_blocks * 512)
        while stack:
            if self.stop:
                return None
            try:
                it = os.scandir(stack.pop())
            except OSError:
                continue
            with it:
                for e in it:
                    if self.names is not None and self.names.match(os.fsencode(e.name)):
                        continue
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if e.path not in self.excludes:
                                stack.append(e.path)
                            continue
                        if e.is_file(follow_symlinks=False):
                            st = e.stat(follow_symlinks=False)
                            if st.st_nlink > 1:
                                key = (st.st_dev, st.st_ino)
                                if key in seen:
                                    files += 1
                                    continue
                                seen.add(key)
                            nbytes += min(st.st_size, st.st_blocks * 512)
                        elif not e.is_symlink() and stat.S_ISSOCK(
                                e.stat(follow_symlinks=False).st_mode):
                            continue
                    except OSError:
                        continue
                    files += 1
        return {"files": files, "bytes": nbytes}


_NO_CHILD = object()


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _child(totals, w):  # pragma: no cover - runs in the forked child
    """The forked child: nothing of the agent but this count. It keeps only the pipe of its
    answer open, so that no connection, pipe or file of the agent (its protocol on stdin and
    stdout among them) stays open in it, and leaves without running any of the agent's
    clean-up."""
    code = 1
    try:
        os.closerange(0, w)
        os.closerange(w + 1, _MAX_FD)
        result = totals.count()
        os.write(w, b"%d %d" % (result["files"], result["bytes"]))
        code = 0
    finally:
        os._exit(code)


try:
    _MAX_FD = os.sysconf("SC_OPEN_MAX")
except (AttributeError, ValueError, OSError):
    _MAX_FD = 1 << 16
