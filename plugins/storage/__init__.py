"""Storage server types. Each type is a module with one interface (see advanced_disk); the
registry below is the one place that lists them."""

from plugins.storage import advanced_disk, dedup

TYPES = {
    advanced_disk.TYPE: advanced_disk,
    dedup.TYPE: dedup,
}

# Types named in the CLI contract but not shipped in this version; creating one says so.
PLANNED = {}


def get(type_name):
    return TYPES.get(type_name)
