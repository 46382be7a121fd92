"""The credentials of a cloud pool's bucket, kept by the master.

An admin gives them as a file of `access_key=` and `secret_key=` lines that only its owner
may read (mode 0600 or stricter: a file others can read is refused, not used). The master
keeps its own copy beside the pools' encryption keys (CAIRN_HOME/keys/SERVER.s3, mode 0600),
never in the catalog, and hands them to the storage host's agent with each request that
reaches the bucket, over the SSH channel; a client never gets them."""

import os
import stat

from app.errors import CairnError, ValidationError
from app.formats import private

FIELDS = ("access_key", "secret_key")


class CredentialsMissing(CairnError):
    pass


def parse(text, source):
    """{"access_key", "secret_key"} from `key=value` lines (blank lines and # comments
    allowed); ValidationError naming `source` when one is missing or given twice."""
    out = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in FIELDS:
            raise ValidationError(f"{source}, line {n}: expected access_key=... or "
                                  "secret_key=...")
        if key in out:
            raise ValidationError(f"{source}, line {n}: {key} is given twice")
        if not value:
            raise ValidationError(f"{source}, line {n}: {key} is empty")
        out[key] = value
    missing = [k for k in FIELDS if k not in out]
    if missing:
        raise ValidationError(f"{source} has no {' and no '.join(missing)}",
                              hint="the file holds two lines: access_key=KEY and "
                                   "secret_key=SECRET")
    return out


def read_file(path):
    """The credentials of a file an admin gives; refused when others may read it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ValidationError(f"the credentials file {path} does not exist") from None
    except OSError as e:
        raise ValidationError(f"the credentials file {path} cannot be read: "
                              f"{e.strerror}") from None
    with os.fdopen(fd) as f:
        mode = os.fstat(f.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise ValidationError(f"the credentials file {path} is not a regular file")
        if mode & 0o077:
            raise ValidationError(
                f"the credentials file {path} may be read by others (mode "
                f"{stat.S_IMODE(mode):04o})", hint=f"chmod 600 {path}, and think about "
                "whether the key must be replaced")
        return parse(f.read(), path)


def path(home, storage_server):
    return os.path.join(home.keys, f"{storage_server}.s3")


def store(home, storage_server, creds):
    """Keeps a copy for the master (replacing an earlier one, durably)."""
    os.close(private.makedirs(home.keys))
    final = path(home, storage_server)
    tmp = final + ".new"
    fd = private.create(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={creds[k]}\n" for k in FIELDS))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)


def load(home, storage_server):
    p = path(home, storage_server)
    try:
        with open(p) as f:
            return parse(f.read(), p)
    except FileNotFoundError:
        raise CredentialsMissing(
            f"the bucket credentials of storage server {storage_server!r} are missing ({p})",
            hint="give them again: the credentials file of the bucket") from None


def remove(home, storage_server):
    try:
        os.unlink(path(home, storage_server))
    except FileNotFoundError:
        pass
