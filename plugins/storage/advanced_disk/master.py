"""AdvancedDisk, the master half: backup images as plain pax tar files on the mounted file
systems of a storage server (for example a GPFS mount). The image format is documented in
docs/image-format.md; the data movers live in the agent (app/agent/archiver/) and this type's
agent half (plugins/storage/advanced_disk/agent.py).

Master-side decisions only: where an image goes, whether the pool may take it."""

from plugins.storage.base import SPREAD_SLACK, BackupSide, Capabilities, StorageType, \
    choose_volume, image_paths_in

TYPE = "advanced-disk"
DESCRIPTION = ("Backup images stored as plain files on the storage server's mounted file "
               "systems: simple, fast, readable with standard tools.")
NEEDS_PATH = False

IMAGE_DIR = "cairn-images"

__all__ = ["AdvancedDisk", "ADVANCED_DISK", "TYPE", "DESCRIPTION", "NEEDS_PATH", "IMAGE_DIR",
           "SPREAD_SLACK", "choose_volume", "image_paths"]


def image_paths(volume, client, image_id):
    """(partial path, final path) of an image on a volume. The partial name starts with a
    dot so that nobody mistakes it for a committed image."""
    return image_paths_in(volume, IMAGE_DIR, client, image_id, ".tar")


class AdvancedDisk(StorageType):
    name = TYPE
    description = DESCRIPTION
    needs_path = NEEDS_PATH
    image_dir = IMAGE_DIR
    verifier = "members"
    capabilities = Capabilities(import_images=True)

    def image_paths(self, volume, client, image_id):
        return image_paths(volume, client, image_id)

    def backup_side(self, *, server, pool, home, volume, image_id, policy, client_host):
        return BackupSide(self, self.access(server, home), pool=pool, volume=volume,
                          image_id=image_id)

    def duplicate_side(self, *, server, pool, home, volume, image_id):
        """A copy arrives as the image's stream and is written as its tar file."""
        return BackupSide(self, self.access(server, home), pool=pool, volume=volume,
                          image_id=image_id)


ADVANCED_DISK = AdvancedDisk()
