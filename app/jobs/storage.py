"""The storage type behind a disk pool or an image, for the jobs (plugins/storage/base.py):
they ask it what to tell the agents, never which type it is."""

from plugins.storage import registry


def pool_type(master, pool_name):
    """(pool, storage server, its host, StorageType) of a disk pool of any type."""
    pool = master.config.disk_pool(pool_name)
    server = master.config.storage_server(pool["server"])
    return pool, server, master.config.host(server["host"]), registry.of_server(server)


def pool_storage(master, server):
    """The storage spec of a storage server's pool (StorageType.access)."""
    return registry.of_server(server).access(server, master.home)


def image_storage(master, image):
    """The storage spec the storage host's agent needs to read an image."""
    pool = master.config.disk_pool(image["pool"])
    return pool_storage(master, master.config.storage_server(pool["server"]))
