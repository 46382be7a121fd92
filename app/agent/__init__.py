"""The Cairn agent: runs on every client and storage host with the host's own python3 (3.9+)
and its standard library alone. Nothing in this package may import outside the standard
library, `app.agent` and `plugins.filesystems`."""
