"""A restore in several processes (streams), for a restore whose image and target are on
one host.

One interpreter creates, writes and checks files only as fast as its single lock lets its
threads take turns: with many files of 64 KiB-1 MiB, each direct write and each create
waits for the lock again. So the files are cut into contiguous parts of about equal size
and each part is restored by a forked process of its own, with its own reading, checking
and writing threads. The parent makes the directories first, relays the parts' events,
restores hard links once every part is done (their targets may be in any part), and
applies directory metadata last, as a restore in one process does.

A plan that could make two parts write the same name (a relocation that maps two items to
one place) is restored in one process, where the second one meets the first. So is one whose
processes cannot all be started: they wait at a gate until the last one is forked.

A part gets a copy of every descriptor of the agent. It closes the sockets and pipes among
them at once (another job's connection must reach its end of file when the agent closes it,
not when the part ends); a deduplication pool's store locks are closed by the fork hook of
plugins/storage/dedup/locks.py.
A part killed by a signal cannot remove its temporary files: the parent does (sweep).

Standard library only: this runs on client hosts.
"""

import mmap
import os
import pickle
import select
import stat
import struct
import time

from app import status
from app.agent.extract import _Restore, check_request, restore_from
from app.agent.restore_tally import PROGRESS_EVERY
from app.agent.restore_target import (_DIR_FLAGS, _plan_components, _plan_name, _Refused,
                                      opened)
from app.errors import CairnError, Canceled
from app.formats import entry, tarfmt
from app.formats.protocol import error_message


# Streams by default: one per core, up to MAX_STREAMS (the target's file system, not the
# cores, is the limit beyond that), for restores of at least MIN_BYTES (below, a restore is
# over before more processes pay off). CAIRN_RESTORE_STREAMS=N in the agent's environment
# sets the number for a host, for restores of any size; 1 restores in one process.
MAX_STREAMS = 4
MIN_BYTES = 64 << 20
# What a file costs beside its bytes (create, check, rename), in bytes of data, for cutting
# the parts to about equal times.
PER_FILE = 64 << 10

_FRAME = struct.Struct("!I")


def default_streams():
    """(streams, whether the host's environment set the number)."""
    v = os.environ.get("CAIRN_RESTORE_STREAMS", "").strip()
    if v:
        try:
            return max(1, int(v)), True
        except ValueError:
            pass
    return max(1, min(os.cpu_count() or 1, MAX_STREAMS)), False


def split_plan(plan, streams, min_bytes=0, sizes=None):
    """(directories, parts, links): indexes into the plan, or None to restore it in one
    process. parts: `streams` contiguous runs of the other items, of about equal cost.
    sizes: the bytes each item reads from the image (else the plan's "size", which for a
    sparse file is more than it reads)."""
    if streams < 2 or not hasattr(os, "fork"):
        return None
    dirs, links, rest, cost = [], [], [], []
    places = set()
    total = 0
    for i, item in enumerate(plan):
        kind = item.get("kind")
        if kind == entry.KIND_DIR:
            dirs.append(i)
            continue
        to = item.get("to")
        try:
            place = _plan_name(to if to is not None else item.get("path", ""))
        except (_Refused, KeyError, TypeError, ValueError):
            place = None  # refused by whichever part gets it
        if place is not None:
            if place in places:
                return None
            places.add(place)
        if kind == entry.KIND_HARDLINK:
            links.append(i)
        else:
            c = _cost(sizes[i] if sizes is not None else item.get("size"))
            rest.append(i)
            cost.append(c)
            total += c
    if total < min_bytes or len(rest) < 2 * streams:
        return None
    parts = []
    start = 0
    acc = 0
    for k, c in enumerate(cost):
        acc += c
        if acc * streams >= total * (len(parts) + 1) and len(parts) < streams - 1:
            parts.append(rest[start:k + 1])
            start = k + 1
    parts.append(rest[start:])
    parts = [p for p in parts if p]
    return (dirs, parts, links) if len(parts) > 1 else None


def _cost(size):
    if type(size) is not int:
        try:
            size = int(size or 0)
        except (TypeError, ValueError):
            size = 0
    return max(size, 0) + PER_FILE


def restore_in_streams(source_for, target_dir, plan, *, overwrite, emit, is_cancelled,
                       checksum=tarfmt.DEFAULT_CHECKSUM, direct=False, direct_for=None,
                       streams=None, min_bytes=None, sizes=None, after_fork=None):
    """restore_from (see there) in up to `streams` processes (default: default_streams()),
    when the files to restore come to at least `min_bytes` (default: MIN_BYTES, 0 when the
    host's environment sets the number of streams).

    source_for(indexes): a stream of the members of those plan items, in that order, with
    close(); the streams of every part are opened before anything is written, so that a
    missing image ends the restore before it began. sizes: each item's length in the
    image (its member's): they cut the plan into parts of equal cost (see split_plan), and
    let a restore read on past a damaged member (see restore_from's lengths).
    after_fork(parts): run first in each forked process, given how many parts restore at
    once (locks that another thread of the agent may have held at the fork are made anew
    there; reading may be arranged for the number of processes). The summary gains
    "streams", the number of processes that restored files."""
    check_request(overwrite, checksum)
    chosen = True
    if streams is None:
        streams, chosen = default_streams()
    if min_bytes is None:
        min_bytes = 0 if chosen else MIN_BYTES
    cut = split_plan(plan, streams, min_bytes, sizes)
    # The target is opened after the image's streams, so that a missing image ends the
    # restore before anything was made; the parts inherit its descriptor and never open
    # the path.
    opening = []

    def target():
        if not opening:
            opening.append(opened(target_dir))
        return opening[0][0]

    try:
        if cut is None:
            src = source_for(range(len(plan)))
            try:
                summary = restore_from(src, target(), plan, overwrite=overwrite, emit=emit,
                                       is_cancelled=is_cancelled, checksum=checksum,
                                       direct=direct, direct_for=direct_for, lengths=sizes)
            finally:
                src.close()
            summary["streams"] = 1
        else:
            dirs, parts, links = cut

            def new_restore(src, emit, is_cancelled):
                return _Restore(src, target(), overwrite, emit, is_cancelled, plan, checksum,
                                direct, direct_for)

            summary = _Streams(source_for, plan, new_restore, emit, is_cancelled,
                               after_fork, sizes).run(dirs, parts, links)
        if opening and opening[0][1]:
            opening[0][0].publish()
        return summary
    finally:
        if opening and opening[0][1]:
            opening[0][0].close()


class _Part:
    __slots__ = ("pid", "fd", "indexes", "data", "progress", "result", "error", "ended")

    def __init__(self, pid, fd, indexes):
        self.pid = pid
        self.fd = fd
        self.indexes = indexes
        self.data = b""
        self.progress = (0, 0)
        # (counts, restored link targets, directories made on the way, files with flags)
        self.result = None
        self.error = None
        self.ended = False


class _Streams:
    def __init__(self, source_for, plan, new_restore, emit, is_cancelled, after_fork,
                 lengths=None):
        self.source_for = source_for
        self.plan = plan
        self.lengths = lengths
        self.new_restore = new_restore  # (stream, emit, is_cancelled) -> a _Restore
        self.emit = emit
        self.is_cancelled = is_cancelled
        self.after_fork = after_fork
        self.parts = []
        self.streams = 0  # how many parts restore at once
        # set by the parent to stop the parts: a shared page, read at every item
        self.stop = mmap.mmap(-1, mmap.PAGESIZE)
        self.last_progress = 0.0

    def run(self, dirs, parts, links):
        sources = []
        r = None
        streams = len(parts)
        try:
            for indexes in [dirs] + parts + [links]:
                sources.append(self.source_for(indexes))
            r = self.new_restore(sources[0], self.emit, self.is_cancelled)
            self.run_items(r, dirs)
            self.streams = streams
            try:
                failure = self.start_parts(r, parts, sources[1:1 + len(parts)])
                if failure is None:
                    for src in sources[1:1 + len(parts)]:
                        src.close()  # the parts read them
                    self.relay(r)
            finally:
                self.end_parts(r)
            if failure is None:
                self.collect(r)
                # the names the parts put in the directories are not in r's notes: from
                # here on every name is looked up
                r.fresh = {}
            else:
                # no part had begun: this process restores their files itself
                self.parts = []
                r.tally.log("the files were restored in one process: the processes for %d "
                            "parallel streams could not be started (%s)" % (len(parts), failure))
                for k, indexes in enumerate(parts):
                    r.use_source(sources[1 + k])
                    self.run_items(r, indexes)
                streams = 1
            if links:
                r.use_source(sources[-1])
                self.run_items(r, links)
            summary = r.complete()
        except BaseException:
            if r is not None:
                try:
                    self.progress(r, force=True)  # what is in place is counted
                except Exception:  # noqa: BLE001 - the failure itself is reported
                    pass
            raise
        finally:
            if r is not None:
                r.close()
            for src in sources:
                src.close()
            self.stop.close()
        summary["streams"] = streams
        return summary

    def run_items(self, r, indexes):
        lengths = self.lengths
        r.run_items([self.plan[i] for i in indexes],
                    None if lengths is None else [lengths[i] for i in indexes])

    # -- the parts' processes

    def start_parts(self, r, parts, sources):
        """Forks a process for each part. They all wait at a gate until every one is
        there, so that when a fork fails (no memory, too many processes) none has begun
        and the restore can go on in this process: returns what failed, else None."""
        try:
            gate_r, gate_w = os.pipe()
        except OSError as e:
            return e.strerror or str(e)
        try:
            for indexes, src in zip(parts, sources):
                try:
                    self.parts.append(self.fork(r, indexes, src, gate_r, gate_w))
                except OSError as e:
                    return e.strerror or str(e)
            os.write(gate_w, b"g" * len(self.parts))
            return None
        finally:
            os.close(gate_r)
            os.close(gate_w)  # a part still at the gate then reads its end: it leaves

    def fork(self, r, indexes, src, gate_r, gate_w):
        rfd, wfd = os.pipe()
        try:
            pid = os.fork()
        except BaseException:
            os.close(rfd)
            os.close(wfd)
            raise
        if pid == 0:  # the part: never returns into the agent
            code = 1
            try:
                os.close(rfd)
                os.close(gate_w)
                for p in self.parts:
                    os.close(p.fd)
                if os.read(gate_r, 1) != b"g":
                    os._exit(0)  # the restore goes on without the parts
                os.close(gate_r)
                _close_foreign_channels(keep={wfd})
                code = self.part(r, indexes, src, wfd)
            finally:
                os._exit(code)
        os.close(wfd)
        return _Part(pid, rfd, indexes)

    def part(self, parent, indexes, src, wfd):
        def send(msg):
            data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
            data = _FRAME.pack(len(data)) + data
            while data:
                data = data[os.write(wfd, data):]

        ppid = os.getppid()
        stop = self.stop

        def stopped():
            return stop[0] != 0 or os.getppid() != ppid

        try:
            if self.after_fork is not None:
                self.after_fork(self.streams)
            try:
                r = self.new_restore(src, lambda event, data: send(("event", event, data)),
                                     stopped)
                try:
                    r.take_directories(parent)
                    self.run_items(r, indexes)
                    r.tally.progress(force=True)
                    result = (r.tally.counts(), r.restored, r.implicit, r.flagged)
                finally:
                    r.close()
            finally:
                src.close()
            send(("done",) + result)
            return 0
        except BaseException as e:  # noqa: BLE001 - the parent reports it
            try:
                send(("error", error_message("restore", e)))
            except OSError:
                pass  # the parent is gone
            return 1

    def relay(self, r):
        """Passes the parts' events on until every part has ended; stops them all at a
        cancel or at the first part that fails."""
        live = {p.fd: p for p in self.parts}
        while live:
            if not self.stop[0] and (self.is_cancelled() or any(
                    p.error is not None for p in self.parts)):
                self.stop[0] = 1
            ready, _, _ = select.select(list(live), [], [], 0.1)
            for fd in ready:
                p = live[fd]
                data = os.read(fd, 1 << 16)
                if not data:
                    p.ended = True
                    del live[fd]
                    continue
                p.data += data
                self.take_messages(p)
            self.progress(r)
        self.progress(r, force=True)

    def take_messages(self, p):
        while len(p.data) >= _FRAME.size:
            n, = _FRAME.unpack_from(p.data)
            if len(p.data) < _FRAME.size + n:
                return
            msg = pickle.loads(p.data[_FRAME.size:_FRAME.size + n])
            p.data = p.data[_FRAME.size + n:]
            if msg[0] == "event":
                _, event, data = msg
                if event == "progress":
                    p.progress = (data["files"], data["bytes"])
                else:
                    self.emit(event, data)
            elif msg[0] == "done":
                p.result = msg[1:]
            else:
                p.error = msg[1]

    def progress(self, r, force=False):
        now = time.monotonic()
        if force or now - self.last_progress >= PROGRESS_EVERY:
            self.last_progress = now
            tally = r.tally
            self.emit("progress", {"files": tally.files + sum(p.progress[0] for p in self.parts),
                                   "bytes": tally.bytes + sum(p.progress[1] for p in self.parts)})

    def end_parts(self, r):
        """Waits for every part; on the way out after an error in the parent itself, the
        parts are told to stop first. A part that ended without a word (killed) had no
        chance to remove its half-written files: they are removed here."""
        if not all(p.ended for p in self.parts):
            self.stop[0] = 1
        for p in self.parts:
            try:
                _, st = os.waitpid(p.pid, 0)
            except ChildProcessError:
                st = 0
            os.close(p.fd)
            if p.result is None and p.error is None:
                p.error = {"code": status.INTERNAL, "message": "a restore stream ended "
                           "without a result (%s)" % _exit_text(st)}
                if st:
                    removed = self.sweep(r, p)
                    if removed:
                        r.tally.log("removed %d half-written file(s) of the restore stream "
                                    "that ended (%s)" % (removed, _exit_text(st)))

    def sweep(self, r, p):
        """Removes the temporary files part p left in the directories of its items; returns
        how many. The directories are opened without following links, as a restore does."""
        dirs = set()
        for i in p.indexes:
            item = self.plan[i]
            try:
                comps = _plan_components(item["to"] if item.get("to") is not None
                                         else item.get("path", ""))
            except (_Refused, KeyError, TypeError, ValueError):
                continue
            comps = r.map_dirs(list(comps))
            if comps:
                dirs.add(tuple(comps[:-1]))
        prefix = b".cairn-restore-%d-" % p.pid
        removed = 0
        for comps in sorted(dirs):
            fd = None
            try:
                fd = os.dup(r.root)
                for c in comps:
                    nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
                    os.close(fd)
                    fd = nfd
                for name in map(os.fsencode, os.listdir(fd)):
                    if name.startswith(prefix) and name.endswith(b".tmp"):
                        os.unlink(name, dir_fd=fd)
                        removed += 1
            except OSError:
                continue  # gone or not a directory: nothing of the part is there
            finally:
                if fd is not None:
                    os.close(fd)
        return removed

    def collect(self, r):
        """The parts' counts and link targets into r, or the error that ended the restore:
        the first part's own failure comes before the cancellations it caused."""
        errors = [p.error for p in self.parts if p.error is not None]
        if errors:
            own = [e for e in errors if e["code"] != status.CANCELED]
            if not own:
                raise Canceled()
            raise CairnError(own[0]["message"], status_code=own[0]["code"])
        for p in self.parts:
            counts, restored, implicit, flagged = p.result
            r.tally.add_counts(counts)
            r.restored.update(restored)
            r.implicit.extend(implicit)
            r.flagged.extend(flagged)


def _close_foreign_channels(keep):
    """In a part: closes the sockets and pipes it got from the agent (other jobs' data
    connections, the pipes of their commands, the agent's own channel to the master, a
    cloud pool's pooled connections to its bucket), so that none of them waits for an end
    of file while the part runs. Each becomes /dev/null rather than a free number: the
    Python objects that own them (a socket garbage collected in the part, a connection
    pool) close them by number some time later, which must not close a file the part has
    opened since under the same number. stderr stays, for what the interpreter itself
    reports."""
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(1024)
    null = None
    for fd in fds:
        if fd in keep or fd == 2:
            continue
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            continue
        if not (stat.S_ISSOCK(mode) or stat.S_ISFIFO(mode)):
            continue
        if null is None:
            null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, fd, inheritable=fd <= 2)
    if null is not None and null > 2:
        os.close(null)


def _exit_text(st):
    if os.WIFSIGNALED(st):
        return "killed by signal %d" % os.WTERMSIG(st)
    return "exit status %d" % os.waitstatus_to_exitcode(st)
