"""Recovering from a catalog backup on a host reached over SSH (`cairn catalog recover
--host`): the pool's folder is on the storage host, not on this machine. The newest complete
archive there is copied over SFTP into a private folder beside the new home and recovered
from that copy as from a local folder (recover.py), then the copy is removed.

The host key is checked as for any host: a key never seen is refused with its fingerprint
unless the administrator trusts it (--trust-host-key, after checking the fingerprint), and
once the archive is recovered, a key that differs from the one its known_hosts holds for that
host is refused. On the host, the folder and the archive must be as trustworthy as a local
one: owned by root or the login user, writable by no one else (recover.check_trusted_folder
says why). The archive's own authentication (its manifest's code) holds whatever the path."""

import os
import posixpath
import re
import shutil
import stat
import tempfile

from app import status as st
from app.catalog_backup import archive, recover
from app.errors import CairnError, HostKeyChanged, ValidationError
from app.formats import private
from app.transport import hostkeys
from app.transport.ssh import SSHTransport

_TARGET = re.compile(r"^(?:(?P<user>[^@\s]+)@)?(?P<host>\[[^\]]+\]|[^:\s]+)(?::(?P<port>\d+))?$")


def parse_target(text):
    """(user or None, address, port) of `[USER@]HOST[:PORT]`."""
    m = _TARGET.match(text or "")
    if not m:
        raise ValidationError(f"--host {text!r} is not [USER@]HOST[:PORT]")
    host = m.group("host").strip("[]")
    port = int(m.group("port") or 22)
    if not 0 < port < 65536:
        raise ValidationError(f"port {port} in --host is not a port")
    return m.group("user"), host, port


class _Remote:
    """The storage host's folder of catalog backups, over SFTP."""

    def __init__(self, transport, from_dir):
        self.t = transport
        self.sftp = transport.sftp()
        code, out, _ = transport.run("id -u")
        self.uid = int(out.strip()) if code == 0 and out.strip().isdigit() else None
        self.where = transport.address
        try:
            top = self.sftp.normalize(from_dir)
        except OSError as e:
            raise ValidationError(f"{from_dir} on {self.where} cannot be read: "
                                  f"{e.strerror or e}",
                                  hint="--from names the pool's path (or its catalog-backups "
                                       "folder) as the host sees it") from None
        sub = posixpath.join(top, archive.FOLDER)
        self.folder = sub if self._is_dir(sub) else top

    def _is_dir(self, path):
        try:
            return stat.S_ISDIR(self.sftp.stat(path).st_mode)
        except OSError:
            return False

    def _trusted(self, uid):
        return uid == 0 or uid == self.uid

    def check_folder(self):
        path = self.folder
        while True:
            s = self.sftp.stat(path)
            if not self._trusted(s.st_uid):
                raise CairnError(f"{path} on {self.where} belongs to uid {s.st_uid}, who could "
                                 "have put a catalog backup there; it is not read",
                                 hint=recover.UNTRUSTED_HINT, status_code=st.INVALID_REQUEST)
            if s.st_mode & 0o022 and not s.st_mode & stat.S_ISVTX:
                raise CairnError(f"{path} on {self.where} can be written by other users, who "
                                 "could have put a catalog backup there; it is not read",
                                 hint=recover.UNTRUSTED_HINT, status_code=st.INVALID_REQUEST)
            if path == "/":
                return
            path = posixpath.dirname(path)

    def newest(self):
        self.check_folder()
        names = sorted((n for n in self.sftp.listdir(self.folder)
                        if archive.is_complete_name(n)), key=archive.sort_key, reverse=True)
        if not names:
            raise ValidationError(f"there is no catalog backup in {self.folder} on "
                                  f"{self.where}",
                                  hint="catalog backups are in the folder catalog-backups at "
                                       "a pool's path")
        path = posixpath.join(self.folder, names[0])
        s = self.sftp.lstat(path)
        why = None
        if not stat.S_ISREG(s.st_mode):
            why = "it is not a regular file"
        elif not self._trusted(s.st_uid):
            why = f"it belongs to uid {s.st_uid}"
        elif s.st_mode & 0o022:
            why = "other users can write it"
        if why:
            raise CairnError(f"the catalog backup {path} on {self.where} is not read: {why}",
                             hint=recover.UNTRUSTED_HINT, status_code=st.INVALID_REQUEST)
        return path

    def fetch(self, path, into):
        local = os.path.join(into, posixpath.basename(path))
        with os.fdopen(private.create(local, os.O_WRONLY | os.O_EXCL), "wb") as f:
            try:
                self.sftp.getfo(path, f)
            except OSError as e:
                raise CairnError(f"the catalog backup {path} on {self.where} cannot be read: "
                                 f"{e.strerror or e}", status_code=st.IMAGE_DAMAGED) from None
            f.flush()
        return local


def _check_recovered_key(root, address, port, key):
    """The recovered known_hosts must not hold another key for the host just reached."""
    path = os.path.join(root, "known_hosts")
    known = hostkeys.find(path, address, port) if os.path.isfile(path) else []
    if known and not any(k.key is not None and k.key.asbytes() == key.asbytes()
                         for k in known):
        raise HostKeyChanged(
            f"the host key of {address} ({hostkeys.fingerprint(key)}) differs from the one "
            "the recovered master trusted for it; the recovery was undone",
            hint="someone may be in the middle; check the host's key with its administrator "
                 "before you recover from it")


def recover_from_host(root, target, from_dir, passphrase, *, key_file=None,
                      trust_host_key=False):
    """Recovers a master into the empty home `root` from the newest catalog backup under
    `from_dir` on the host `target` ([USER@]HOST[:PORT])."""
    user, address, port = parse_target(target)
    root = os.path.abspath(root)
    recover.check_empty(root)
    existed = os.path.isdir(root)
    parent = os.path.dirname(root)
    os.makedirs(parent, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".cairn-recover-download-", dir=parent)
    t = SSHTransport(address, port=port, user=user, key_file=key_file,
                     known_hosts=os.path.join(work, "known_hosts"),
                     trust_unknown_key=trust_host_key)
    try:
        remote = _Remote(t, from_dir)
        path = remote.newest()
        local = remote.fetch(path, work)
        key = t.connect().get_remote_server_key()
        t.close()
        doc = recover.recover(root, work, passphrase, archive_path=local)
        try:
            _check_recovered_key(root, address, port, key)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            if existed:
                os.mkdir(root, 0o700)  # as empty as it was
            raise
    finally:
        t.close()
        shutil.rmtree(work, ignore_errors=True)
    doc.update(backup=f"{address}:{path}", host=address,
               host_key_fingerprint=hostkeys.fingerprint(key))
    return doc
