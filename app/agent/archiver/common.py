"""What the parts of the data mover share: buffer and batch sizes, how often progress is
reported, the flags directories are opened with and the text of an OS error.

Each part imports these names into its own globals: the per-file and per-byte loops read
them as plain globals."""

import os

CHUNK = 1 << 20
NBUF = 8
ROW_BATCH = 5000
PROGRESS_EVERY = 0.25

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def why(e):
    return (e.strerror or str(e)).lower() if isinstance(e, OSError) else str(e)
