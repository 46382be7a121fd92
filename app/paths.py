"""Where the master keeps its state: CAIRN_HOME, or --home, or the user's data directory."""

import os

from app.errors import CairnError
from app.formats import private


def default_home():
    env = os.environ.get("CAIRN_HOME")
    if env:
        return os.path.abspath(env)
    import platformdirs  # only here: a command given its home (CAIRN_HOME) does without
    return platformdirs.user_data_dir("cairn", appauthor=False)


class Home:
    """The master's state directory and the files in it."""

    def __init__(self, root=None):
        self.root = os.path.abspath(root or default_home())

    def ensure(self):
        """Makes the state directory and its folders (missing ones too) private to the user
        the master runs as, and its files with them: the catalog names every client, file
        and host, the keys open encrypted pools. The catalog file is made before sqlite
        opens it, so that its journal files, which sqlite gives the catalog's mode, are
        private too. What was open to other users is kept in .loosened (see
        app/formats/private.py)."""
        try:
            self.loosened = self._make_private()
        except OSError as e:
            raise CairnError(f"the state directory {self.root} cannot be used: "
                             f"{e.strerror or e}",
                             hint="CAIRN_HOME (or --home) must be a directory of the user "
                                  "the master runs as, or a path where it can make one") from None
        return self

    def _make_private(self):
        changed = []
        fd = private.makedirs(self.root, changed=changed, top=True)
        try:
            for d in (self.indexes, self.work):
                os.close(private.private_dir(os.path.basename(d), dir_fd=fd, changed=changed,
                                             path=d))
            os.close(private.create(self.catalog, os.O_RDWR, changed=changed))
            for name in os.listdir(fd):
                private.private_file(name, dir_fd=fd, changed=changed,
                                     path=os.path.join(self.root, name))
        finally:
            os.close(fd)
        if any(c["path"] == self.indexes for c in changed):
            # An index folder open to others (an older Cairn made it so): its files once. In
            # a private folder, each index is written private (app/catalog_index/).
            private.walk(self.indexes, changed)
        # a key or two; made with the first (plugins/storage/dedup/keys.py)
        private.walk(self.keys, changed)
        return changed

    @property
    def catalog(self):
        return os.path.join(self.root, "catalog.db")

    @property
    def known_hosts(self):
        return os.path.join(self.root, "known_hosts")

    @property
    def indexes(self):
        return os.path.join(self.root, "indexes")

    @property
    def work(self):
        return os.path.join(self.root, "work")

    @property
    def keys(self):
        return os.path.join(self.root, "keys")

    def key_path(self, storage_server):
        return os.path.join(self.keys, f"{storage_server}.key")

    def index_path(self, image_id):
        return os.path.join(self.indexes, f"{image_id}.cidx")
