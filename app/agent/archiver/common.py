"""What the parts of the data mover share: buffer and batch sizes, how often progress is
reported, the flags directories are opened with and the text of an OS error.

Each part imports these names into its own globals: the per-file and per-byte loops read
them as plain globals."""

import os
import sys

CHUNK = 1 << 20
NBUF = 8
ROW_BATCH = 5000
# Rows are sent once this many wait (up to ROW_BATCH at once): the master indexes each batch
# as it comes, and what it still has to index when the backup ends, the last batch, is what
# the command waits for after the walk (5,000 rows were 20 ms of it).
ROW_SEND = 1000
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
