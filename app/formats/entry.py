"""The file entry row: how one backed-up file is described to the master, in the catalog file
index and in the image's own trailing index member.

A row is a JSON list, fields in this order:

  0 path      absolute path on the client (str; bytes that are not UTF-8 are carried as
              surrogate escapes, so os.fsencode(path) gives back the exact name)
  1 kind      KIND_* below
  2 mode      permission bits (st_mode & 0o7777)
  3 uid       numeric owner
  4 gid       numeric group
  5 size      logical size in bytes for regular files, 0 otherwise
  6 mtime_ns  modification time, nanoseconds since the epoch
  7 offset    byte offset in the image of the member's first header block
  8 length    bytes of the whole member (headers, data, padding): [offset, offset+length)
              copied raw from the image is a complete tar member
  9 checksum  hex SHA-256 tree digest of the file data as stored (tarfmt.TreeHash: SHA-256
              over the SHA-256 digests of 1 MiB pieces; the data segments in order, so
              holes of sparse files are not hashed); "" for anything but regular files
 10 link      symlink target, or for KIND_HARDLINK the absolute client path of the entry it
              links to; "" otherwise
"""

KIND_FILE = "f"
KIND_DIR = "d"
KIND_SYMLINK = "l"
KIND_HARDLINK = "h"
KIND_FIFO = "p"
KIND_CHAR = "c"
KIND_BLOCK = "b"
KINDS = (KIND_FILE, KIND_DIR, KIND_SYMLINK, KIND_HARDLINK, KIND_FIFO, KIND_CHAR, KIND_BLOCK)

PATH, KIND, MODE, UID, GID, SIZE, MTIME_NS, OFFSET, LENGTH, CHECKSUM, LINK = range(11)

# An incremental's entry whose state matched the base image's (app/formats/changes.py) has the
# short row [path, UNCHANGED]: every other field is the base image's, and the master takes
# them from the base's index (app/jobs/incremental.py). Most entries of an incremental are
# such rows; a whole row for each cost the client, the transport and the master about twice
# as much as looking at the entry.
UNCHANGED = -1
SHORT_ROW = 2


def is_short(row):
    """Whether a row is an unchanged entry's short row [path, UNCHANGED]."""
    return len(row) == SHORT_ROW
FIELDS = ("path", "kind", "mode", "uid", "gid", "size", "mtime_ns", "offset", "length",
          "checksum", "link")


def row_to_dict(row):
    return dict(zip(FIELDS, row))


def member_name(path):
    """The tar member name of an absolute client path: the path without its leading slash."""
    return path.lstrip("/")
