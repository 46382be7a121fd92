"""Where the master keeps its state: CAIRN_HOME, or --home, or the user's data directory."""

import os

import platformdirs


def default_home():
    env = os.environ.get("CAIRN_HOME")
    if env:
        return os.path.abspath(env)
    return platformdirs.user_data_dir("cairn", appauthor=False)


class Home:
    """The master's state directory and the files in it."""

    def __init__(self, root=None):
        self.root = os.path.abspath(root or default_home())

    def ensure(self):
        for d in (self.root, self.indexes, self.work):
            os.makedirs(d, mode=0o700, exist_ok=True)
        return self

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
