"""AdvancedDisk, the master half: backup images as pax tar files on the mounted file systems
of a storage server (for example a GPFS mount), plain or, when the policy compresses, zstd
compressed in independent frames with a seek table (plugins/storage/advanced_disk/
zframes.py). The image format is documented in docs/image-format.md; the data movers live in
the agent (app/agent/archiver/) and this type's agent half
(plugins/storage/advanced_disk/agent.py).

Master-side decisions only: where an image goes, whether the pool may take it, where it is
compressed."""

import json

from plugins.storage.base import SPREAD_SLACK, BackupSide, Capabilities, ImportSide, \
    StorageType, choose_volume, image_paths_in
from plugins.storage.dedup.master import compression_of

TYPE = "advanced-disk"
DESCRIPTION = ("Backup images stored as plain files on the storage server's mounted file "
               "systems: simple, fast, readable with standard tools.")
NEEDS_PATH = False

IMAGE_DIR = "cairn-images"

__all__ = ["AdvancedDisk", "ADVANCED_DISK", "TYPE", "DESCRIPTION", "NEEDS_PATH", "IMAGE_DIR",
           "SPREAD_SLACK", "choose_volume", "image_paths"]


def image_paths(volume, client, image_id):
    """(partial path, final path) of an image on a volume. The partial name starts with a
    dot so that nobody mistakes it for a committed image. A compressed image keeps the
    name: GNU tar recognises zstd by itself (`tar -xf`), or is told (`tar -I zstd -xf`)."""
    return image_paths_in(volume, IMAGE_DIR, client, image_id, ".tar")


def _mib(n):
    return f"{(n or 0) / (1 << 20):.1f} MiB"


def compression_text(c):
    """The backup job's line on how an image was compressed (the agent's report)."""
    where = "on the client" if c.get("at") == "client" else "on the storage server"
    level = f" level {c['level']}" if c.get("level") else ""
    return (f"compression: {where} ({c.get('codec', 'zstd')}{level}): "
            f"{_mib(c.get('tar_bytes'))} of tar stream stored in "
            f"{_mib(c.get('stored_bytes'))} ({c.get('frames', 0)} frames; "
            "`tar -I zstd -xf` reads the image whole)")


class TarBackup(BackupSide):
    """A backup into an advanced-disk pool: where the image is compressed, if at all."""

    def __init__(self, storage_type, access, *, pool, volume, image_id, compression):
        super().__init__(storage_type, access, pool=pool, volume=volume, image_id=image_id)
        self.compression = compression
        at, level = compression
        if at != "off":
            self.access["compression"] = {"at": at, "level": level}
        self.codecs = None  # what the storage side reads (None: not heard)

    def heard(self, listening):
        self.codecs = listening.get("codecs") or []

    def client_compresses(self):
        """Whether the client is told to compress: the policy says so and the storage host
        can read the image back (it has the codec)."""
        return self.compression[0] == "client" and bool(self.codecs)

    def _plan(self):
        at, level = self.compression
        if at == "off":
            return None
        if self.client_compresses():
            return (f"compression: on the client (zstd level {level}) before the stream "
                    "crosses the network; the storage server stores it as it comes")
        if self.codecs == []:  # heard: the storage host cannot write or read zstd
            return (f"compression: the policy asks for it ({at}), but the storage host's "
                    "Python lacks the zstandard module: the image is stored uncompressed")
        return f"compression: on the storage server (zstd level {level}) as the image arrives"

    def placed_text(self):
        return super().placed_text() + ("" if self.compression[0] == "off" else
                                        ", zstd compressed")

    def local_text(self):
        text = super().local_text()
        at, level = self.compression
        if at == "off":
            return text
        return text + f"; compressing it here (zstd level {level})" + (
            " (the policy asks for the client: the client is the storage host)"
            if at == "client" else "")

    def client_spec(self):
        spec = {"type": self.type.name}
        if self.client_compresses():
            spec["compression"] = {"at": "client", "level": self.compression[1]}
        return spec

    def client_text(self):
        return self._plan()

    def outcome(self, summary, received):
        """How the image was compressed ({"at", "codec", "level", "frames", "tar_bytes",
        "stored_bytes"}), or None: stored as a plain tar."""
        sent = summary.get("compression")
        got = (received or {}).get("compression") if received is not None else sent
        if not got:
            return None
        stats = dict(got)
        stats["level"] = (sent or {}).get("level") or stats.get("level") \
            or self.compression[1]
        return stats

    def catalog_fields(self, stats):
        return {"compression": json.dumps(stats)} if stats else {}

    def result_texts(self, stats):
        return [compression_text(stats)] if stats else []


class TarImport(ImportSide):
    """An import of an advanced-disk pool: a compressed image's frames, as its seek table
    says."""

    def catalog_fields(self, found):
        out = super().catalog_fields(found)
        c = (found.get("store") or {}).get("compression")
        if c:
            out["compression"] = json.dumps(c)
        return out


class AdvancedDisk(StorageType):
    name = TYPE
    description = DESCRIPTION
    needs_path = NEEDS_PATH
    image_dir = IMAGE_DIR
    verifier = "members"
    capabilities = Capabilities(import_images=True, compression=True)

    def image_paths(self, volume, client, image_id):
        return image_paths(volume, client, image_id)

    def backup_side(self, *, server, pool, home, volume, image_id, policy, client_host):
        # a policy without the setting (none reaches here today) makes plain tar files
        compression = compression_of(policy) if policy.get("compression") else ("off", 1)
        return TarBackup(self, self.access(server, home), pool=pool, volume=volume,
                         image_id=image_id, compression=compression)

    def duplicate_side(self, *, server, pool, home, volume, image_id, source=None):
        """A copy arrives as the image's (tar) stream and is written as its tar file,
        compressed on this storage host at the source copy's level when that one is
        compressed (a copy of a deduplicating pool's image: plain, as before)."""
        c = (source or {}).get("compression")
        compression = ("server", c.get("level") or 1) if c else ("off", 1)
        return TarBackup(self, self.access(server, home), pool=pool, volume=volume,
                         image_id=image_id, compression=compression)

    def import_images(self, *, server, pool, home, key_file=None):
        super().import_images(server=server, pool=pool, home=home, key_file=key_file)
        return TarImport(self, self.access(server, home), pool=pool)


ADVANCED_DISK = AdvancedDisk()
