"""What the parts of the data mover share: buffer and batch sizes, how often progress is
reported, the flags directories are opened with and the text of an OS error.

Each part imports these names into its own globals: the per-file and per-byte loops read
them as plain globals."""

import os
import sys

CHUNK = 1 << 20
NBUF = 8
ROW_BATCH = 5000
PROGRESS_EVERY = 0.25

# The walk checks for a cancel, reports progress and sends rows every this many entries, and
# at each directory: per entry, that bookkeeping cost as much as looking at the entry.
TICK_EVERY = 64

# os.fsdecode and os.fsencode, without their per-call wrapper (once per entry of the walk)
FS_ENCODING = sys.getfilesystemencoding()
FS_ERRORS = sys.getfilesystemencodeerrors()

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def why(e):
    return (e.strerror or str(e)).lower() if isinstance(e, OSError) else str(e)
