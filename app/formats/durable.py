"""Making a new name durable: after a file is renamed into place (or created), its folder's
entry is synced too, else a crash can lose the rename although the data was synced."""

import os

_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def sync_dir(path, ignore_errors=False):
    """Syncs the folder `path`. ignore_errors: where the folder's sync is a courtesy (a file
    system that cannot sync folders, or one gone meanwhile), failures are swallowed."""
    try:
        fd = os.open(path, os.O_RDONLY | _DIRECTORY)
    except OSError:
        if ignore_errors:
            return
        raise
    try:
        os.fsync(fd)
    except OSError:
        if not ignore_errors:
            raise
    finally:
        os.close(fd)
