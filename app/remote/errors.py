"""The errors of a master reached over SSH, apart from the client (which loads the SSH
library) so that the console's bridge can name them without loading it."""

from app.errors import CairnError, HostUnreachable


class ConnectionLost(HostUnreachable):
    """The SSH connection to the master broke while calls were waiting on it; the master's
    reconnect() makes a new one."""


class NotOverSSH(CairnError, AttributeError):
    """A part of the master that is its own (its catalog, its dispatcher): not reachable
    through the API."""
