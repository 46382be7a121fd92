"""What the selections hold, in files and bytes, known before the copy ends: counted beside it
(Totals), or taken from a file list made beforehand (Counted)."""

import os
import stat
import threading


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
    be shown long before the copy is over."""

    def __init__(self, roots, excludes=frozenset(), names=None, after=COUNT_AFTER):
        super().__init__(name="cairn-totals", daemon=True)
        self.after = after
        self._stopped = threading.Event()
        self.roots = roots
        self.excludes = excludes
        # the walk's name globs (walk.NamePatterns): their regex, not their count
        self.names = names.regex if names is not None else None
        self.result = None

    @property
    def stop(self):
        return self._stopped.is_set()

    @stop.setter
    def stop(self, value):
        if value:
            self._stopped.set()

    def run(self):
        if self._stopped.wait(self.after):
            return
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
                return
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
        self.result = {"files": files, "bytes": nbytes}

