"""A keyring backend of the tests (the machine has no desktop keyring), registered through
keyring's own API like any other backend (the fixture memory_keyring in conftest.py puts it
in place)."""

from keyring.backend import KeyringBackend


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self):
        super().__init__()
        self.items = {}

    def get_password(self, service, username):
        return self.items.get((service, username))

    def set_password(self, service, username, password):
        self.items[(service, username)] = password

    def delete_password(self, service, username):
        self.items.pop((service, username), None)

