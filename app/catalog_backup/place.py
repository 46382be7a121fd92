"""Where a catalog backup goes: a plain file in the folder catalog-backups/ at the pool's
place (an AdvancedDisk pool's first volume, a deduplicating pool's path), never through the
pool's storage engine, so that it can be read back without the catalog and without the
pool's key. On the master's own machine the master writes it itself; on another host it
goes over SFTP on the host's SSH connection. Either way it is written under a partial name
and then committed by the host's agent (commit_file: synced, renamed, the folder synced)."""

import errno
import os
import posixpath
import stat

from app import status as st
from app.catalog_backup import archive
from app.errors import CairnError
from app.formats import private


# a partial file this old belongs to no catalog backup still writing: removed
PARTIAL_AGE_S = 86400


def folder_of(pool):
    """The folder of a pool's catalog backups, as the storage host sees it."""
    return posixpath.join(pool["volumes"][0], archive.FOLDER)


class Target:
    """One archive being written at a pool: open() gives the file to write, commit() makes it
    durable under its final name, discard() removes what was written."""

    def __init__(self, master, host, folder, partial_name, final_name):
        self.master, self.host, self.folder = master, host, folder
        self.partial = posixpath.join(folder, partial_name)
        self.final = posixpath.join(folder, final_name)
        self.sftp = master.hosts.sftp(host)
        self.f = None

    def open(self):
        try:
            if self.sftp is None:
                volume = posixpath.dirname(self.folder)
                if not os.path.isdir(volume):
                    # never made here: an unmounted volume would be filled on the disk below
                    raise CairnError(f"the pool's volume {volume} is not there",
                                     hint="mount it (or fix the pool's volume), then run the "
                                          "catalog backup again",
                                     status_code=st.VOLUME_UNAVAILABLE)
                os.close(private.makedirs(self.folder, own=1))
                self.f = os.fdopen(private.create(self.partial, os.O_WRONLY | os.O_EXCL), "wb")
            else:
                self._sftp_folder()
                self.f = self.sftp.open(self.partial, "wbx")
                self.f.chmod(private.FILE_MODE)
                self.f.set_pipelined(True)
        except OSError as e:
            raise self.failed(e) from None
        return self.f

    def _sftp_folder(self):
        try:
            self.sftp.mkdir(self.folder, private.DIR_MODE)
        except OSError:
            pass  # there already (or its parent is missing: stat says which)
        try:
            mode = self.sftp.lstat(self.folder).st_mode
        except OSError as e:
            raise self.failed(e) from None
        if not stat.S_ISDIR(mode):
            raise CairnError(f"{self.folder} on host {self.host['name']} is not a folder",
                             hint="move it away: catalog backups go into a folder of that name",
                             status_code=st.STORAGE_WRITE_FAILED)
        if mode & private.OPEN_BITS:
            self.sftp.chmod(self.folder, private.DIR_MODE)

    def failed(self, e):
        full = getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT)
        return CairnError(f"the catalog backup cannot be written to {self.partial} on host "
                          f"{self.host['name']}: {e.strerror or e}",
                          hint="the pool's volume is full: free space on it, or back up the "
                               "catalog to another storage unit" if full else
                               "check that the pool's volume is mounted and writable for the "
                               "agent's user", status_code=st.STORAGE_WRITE_FAILED)

    def commit(self):
        """Closes the file (synced where the master wrote it) and has the host's agent make
        it durable under its final name; returns {"path", "bytes"}."""
        try:
            if self.sftp is None:
                self.f.flush()
                os.fsync(self.f.fileno())
            self.f.close()
        except OSError as e:
            raise self.failed(e) from None
        conn = self.master.hosts.connect(self.host)
        return conn.call("commit_file", {"partial": self.partial, "final": self.final},
                         timeout=600)

    def prune(self, keep_s, now):
        """Removes from the folder the catalog backups made more than keep_s ago (None: none)
        and what backups killed more than a day ago left under partial names; never the
        archive just written, nor anything whose name is not a catalog backup's. Returns the
        names removed."""
        try:
            names = os.listdir(self.folder) if self.sftp is None else self.sftp.listdir(self.folder)
        except OSError:
            return []
        removed = []
        for name in sorted(names):
            made = archive.made_at(name)
            if made is None or name == posixpath.basename(self.final):
                continue
            at, partial = made
            if (at < now - PARTIAL_AGE_S) if partial else \
                    (keep_s is not None and at < now - keep_s):
                path = posixpath.join(self.folder, name)
                try:
                    if self.sftp is None:
                        if stat.S_ISREG(os.lstat(path).st_mode):
                            os.unlink(path)
                    else:
                        self.sftp.remove(path)
                except OSError:
                    continue  # gone already, or not ours to remove: left
                removed.append(name)
        return removed

    def discard(self):
        """Removes the partial file (a failed or canceled backup); what cannot be removed is
        left, and recover skips it by its name (a later catalog backup removes it a day on)."""
        try:
            if self.f is not None:
                self.f.close()  # on a full volume its last flush fails again: still remove
        except (OSError, CairnError):
            pass
        try:
            if self.sftp is None:
                os.unlink(self.partial)
            else:
                self.sftp.remove(self.partial)
        except (OSError, CairnError):
            pass
