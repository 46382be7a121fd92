"""What a damaged index says, and the command that rebuilds an index from its image."""

from __future__ import annotations


def rebuild_command(image_id) -> str:
    """The command that rebuilds an image's index from the image itself: what a hint names."""
    return f"cairn images rebuild-index {image_id} --wait"


def rebuild_hint(image_id) -> str:
    return f"rebuild it from the image with `{rebuild_command(image_id)}`"


class IndexCorrupt(ValueError):
    """The index file is truncated, damaged or of an unknown format. The master names the
    command that rebuilds it from the image (`cairn images rebuild-index IMAGE`)."""

    def __init__(self, path, reason):
        self.path = path
        self.reason = reason
        super().__init__(f"catalog index {path} is corrupt or unreadable: {reason}")
