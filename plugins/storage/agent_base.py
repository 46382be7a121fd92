"""The agent half of a storage type: what an agent does with a storage spec (the dict the
master's StorageType.access and BackupSide make, with the type's name under "type"). The
agent's operations (app/agent/ops.py) take the half of the spec's type from
plugins/storage/agents.py and call it; they never ask which type it is.

Standard library only and Python 3.9: this travels to every host (app/transport/bundle.py).

The objects a half hands out:
  - a LocalWrite (local_write: the client is the storage host): `sink`, what the archiver
    writes the image to (an object with write(), and space()/advance() or reference() where
    the type takes the stream in place or takes a files cache's references); `bases_problem`,
    why a files cache's base images cannot be used, or None; finish() -> what it adds to the
    backup's summary; abort(), which removes what was written.
  - the client's sink over the data plane (client_sink: (sink, note or None)) and what it adds
    to the summary once finished (client_report).
  - a Receiver (receiver: the storage side of a backup from another host): `listening`, what
    it adds to the listening event; take(chan, is_cancelled), which reads the client's data
    connection to its end; finish() -> the result of the request; abort().
  - a Reading (reading: how a restore, send_extents, rebuild-index or an import reads
    images): opener(tolerant) -> None (the image files are read as they are) or a function
    that opens an image path as a source with size, preadinto(), close() and `damage`;
    forked(parts) in a restore's forked process; close_streams() and close().
  - an ImageSource (image_source: an image read whole, for a copy of it in another pool,
    app/agent/duplicate.py): `size` (the image stream's length), preadinto(buf, pos),
    entries() (None, or the chunks of a type that keeps them: the recipe's (fingerprint,
    start, length) in stream order), chunk(fingerprint) -> the chunk's data, checked, and
    close().

An import (`cairn disk-pool import`, app/agent/pool_import.py) finds a pool's images by their
file names (`image_suffix`), asks image_info() what the type keeps about each beside its
stream, and reads each image's own metadata through reading().

A copy goes into the target pool through the target type's own ways in: its client_sink over
the data plane (the receiver on the far side), or its local_write on one host. A sink that
also has copy_entries(entries, chunk_of) takes chunks: given a source with entries() it is
sent only the chunks its pool lacks, and the recipe; any other pair streams the image.

A `sink` of a copy is also told where the stream ends with finish() (the data plane's own
end)."""

import os

from app.errors import CairnError, ValidationError
from app import status


class Reading:
    """Images read as the files they are: nothing to open, nothing to hold."""

    streams = ()

    def opener(self, tolerant=False):
        return None

    def forked(self, parts):
        pass

    def close_streams(self):
        pass

    def close(self):
        pass


class ImageFile:
    """An image file read whole (the ImageSource of a type whose image is its file)."""

    READ = 1 << 20

    def __init__(self, path):
        try:
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except FileNotFoundError:
            raise CairnError(f"image file {path} is missing",
                             status_code=status.IMAGE_DAMAGED) from None
        except OSError as e:
            raise CairnError(f"cannot open image file {path}: {e.strerror}",
                             status_code=status.IMAGE_DAMAGED) from None
        self.path = path
        self.size = os.fstat(self.fd).st_size

    def preadinto(self, mv, pos):
        try:
            return os.preadv(self.fd, [mv], pos)
        except OSError as e:
            raise CairnError(f"reading image file {self.path} failed: {e.strerror}",
                             status_code=status.IMAGE_DAMAGED) from None

    def entries(self):
        return None

    def chunk(self, fp):
        raise ValidationError("an image file has no chunks")

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class AgentStorage:
    """The agent half of a storage type (see the module's docstring)."""

    name = ""
    # Modules a backup or restore into such a pool imports when it begins: loaded once the
    # agent has said hello (app/agent/server.py).
    preload = ()
    # How the type's committed image files end (app/formats/poolfiles.py names them).
    image_suffix = ""

    def warm(self, spec):
        """Opens ahead what a backup into the pool opens first (a deduplication pool: its
        chunk index), while the master still prepares the backup, so that the backup that
        follows on this agent finds it open. Nothing by default."""

    def local_write(self, spec, path, *, emit, image_id, references):
        """A LocalWrite of a new partial image at `path`. references: whether the backup
        brings a files cache (the spec's "bases" are then its base images)."""
        raise NotImplementedError

    def client_sink(self, chan, spec):
        """(sink, note or None): what the client's archiver writes to over the data
        connection `chan`; by default the connection itself."""
        return chan, None

    def client_report(self, sink):
        """What the client's sink adds to the backup's summary once finished."""
        return {}

    def receiver(self, spec, path, emit):
        """A Receiver writing a new partial image at `path`."""
        raise NotImplementedError

    def commit(self, spec, partial, final, emit=None):
        """Makes a finished image visible under its final name, atomically and durably;
        returns {"path", "bytes"}. emit(event, data): what the commit has to say while it
        runs (a cloud pool: its uploads)."""
        raise NotImplementedError

    def reading(self, spec):
        """A Reading of the pool's images."""
        return Reading()

    def image_source(self, spec, path):
        """An ImageSource of the image at `path`, for a copy of it in another pool."""
        raise self.lacks("a way to read an image whole")

    def image_info(self, spec, path):
        """What the type keeps about one committed image beside its stream, for an import:
        a dict the type's master half reads (ImportSide.catalog_fields), {} when nothing. A
        CairnError when the image file cannot be read."""
        return {}

    def verify(self, req, spec, images, pace=None):
        """Reads images back and reports damage (the type's own report; see its verifier).
        pace: an app.formats.pace.Pace to call with the bytes read so far, or None."""
        raise self.lacks("verify")

    def reclaim(self, req, spec, compact_below, known, min_age_s):
        raise self.lacks("space reclaim")

    def usage(self, spec):
        raise self.lacks("chunk usage")

    def rebuild_index(self, spec):
        raise self.lacks("a chunk index to rebuild")

    def remove_image(self, spec, path):
        """Removes a committed image (an expired one), wherever the type keeps it."""
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def prepare_import(self, spec):
        """What an import of the pool's images does before it lists them."""

    def check_server(self, spec):
        """What a new storage server of the type checks on its host beyond its path:
        raises what is wrong; returns what the master reports."""
        return {}

    def lacks(self, what):
        return ValidationError(f"a {self.name} pool has no {what}")
