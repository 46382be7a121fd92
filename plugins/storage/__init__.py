"""Storage server types. Each type is a module with one interface (see advanced_disk); the
registry below is the one place that lists them."""

from plugins.storage import advanced_disk

TYPES = {
    advanced_disk.TYPE: advanced_disk,
}

# Named in the CLI contract but not shipped in this version; creating one says so.
PLANNED = {"dedup": "the deduplicating storage type is not available in this version of Cairn"}


def get(type_name):
    return TYPES.get(type_name)
