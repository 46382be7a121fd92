"""Dedup, the master half: a deduplicating pool on one storage path of the storage server.
Image streams are cut into content-defined chunks, each chunk is compressed and stored once in
container files, and an image is a recipe: the list of its chunks (docs/dedup-pool.md). The
chunk store lives in the agent half (plugins/storage/dedup/agent.py and the modules beside
it); this module holds the master-side decisions, and the pool's key (keys.py) stays with the
master.

The catalog addresses an image's members by their offsets in the image stream, as for
AdvancedDisk, so browsing, incrementals and restores work alike on both types."""

import json

from app.errors import ValidationError
from app.formats.sizes import parse_size, size_text
from plugins.storage.base import BackupSide, Capabilities, ImportSide, StorageType, \
    image_paths_in
from plugins.storage.dedup import keys
from plugins.storage.dedup.chunker import AVG_SIZE_RANGE, DEFAULT_AVG_SIZE, DEFAULT_MAX_SIZE, \
    DEFAULT_MIN_SIZE, DEFAULT_NORMALIZATION, MAX_SIZE_RANGE, MIN_SIZE_RANGE, validate_sizes

TYPE = "dedup"
DESCRIPTION = ("Backup data cut into content-defined chunks, compressed and stored once: far "
               "less space when backups repeat the same data, and with client-side "
               "deduplication only new chunks cross the network.")
NEEDS_PATH = True

# Recipes live next to the chunk store under the storage path; the store's own folders are
# containers/ and index/.
IMAGE_DIR = "images"

MODES = ("server", "client")
HOST_MODES = ("policy",) + MODES

# File systems a deduplication pool should not live on: random reads of containers and the
# index's locks over a network file system are slow and, for locks, not always reliable.
WARN_CLASSES = {"network"}


def image_paths(volume, client, image_id):
    """(partial, final) path of an image's recipe. The partial name starts with a dot so that
    nobody mistakes it for a committed image."""
    return image_paths_in(volume, IMAGE_DIR, client, image_id, ".recipe")


def default_options():
    return {"min_size": DEFAULT_MIN_SIZE, "avg_size": DEFAULT_AVG_SIZE,
            "max_size": DEFAULT_MAX_SIZE, "normalization": DEFAULT_NORMALIZATION,
            "encrypted": False}


def check_options(options):
    """The storage server's options, completed with the defaults and validated. Chunk sizes are
    chosen when the pool is created and may be changed later for new data (change_chunk_sizes):
    other sizes cut the same data differently, so new data deduplicates against what was
    stored with the old ones only where a whole chunk repeats."""
    out = default_options()
    unknown = set(options or {}) - set(out)
    if unknown:
        raise ValidationError(f"unknown dedup option(s): {', '.join(sorted(unknown))}",
                              hint=f"known options: {', '.join(out)}")
    out.update({k: v for k, v in (options or {}).items() if v is not None})
    validate_sizes(out["min_size"], out["avg_size"], out["max_size"], out["normalization"])
    out["encrypted"] = bool(out["encrypted"])
    return out


CHUNK_PARAMS = ("min_size", "avg_size", "max_size", "normalization")


def chunk_params(options):
    o = check_options(options)
    return {k: o[k] for k in CHUNK_PARAMS}


#: what `cairn storage-server set` changes on a deduplicating server: its chunk sizes (the
#: option each one is kept as), for the data of the next backups
SETTINGS = {"min_chunk": "min_size", "avg_chunk": "avg_size", "max_chunk": "max_size"}
SETTINGS_ABOUT = {"min_chunk": "the smallest chunk (even, 64 bytes to 1M)",
                  "avg_chunk": "the average chunk (a power of two, 256 bytes to 4M)",
                  "max_chunk": "the largest chunk (1K to 16M)"}
_RANGES = {"min_chunk": MIN_SIZE_RANGE, "avg_chunk": AVG_SIZE_RANGE,
           "max_chunk": MAX_SIZE_RANGE}


def chunk_text(params):
    """`512 KiB on average (128 KiB to 2 MiB)`."""
    return (f"{size_text(params['avg_size'])} on average ({size_text(params['min_size'])} to "
            f"{size_text(params['max_size'])})")


def _example_average(sizes, changes):
    """The average chunk the admin seems to want, for a hint: the one given, or the one a
    given minimum (a quarter of it) or maximum (four times it) belongs to."""
    if "avg_chunk" in changes:
        avg = sizes["avg_chunk"]
    elif "max_chunk" in changes:
        avg = sizes["max_chunk"] // 4
    else:
        avg = sizes["min_chunk"] * 4
    low, high = AVG_SIZE_RANGE
    avg = min(max(avg, low * 4), high)
    return 1 << (avg.bit_length() - 1)  # a power of two, at most the size found


def change_chunk_sizes(server, options, changes):
    """The options with chunk sizes changed ({min_chunk|avg_chunk|max_chunk: bytes or a size
    such as 256K}), checked with the bounds a new server's are; ValidationError naming the
    setting otherwise. Images already stored keep their chunks: a recipe names its chunks by
    fingerprint, whatever sizes cut them."""
    unknown = [k for k in changes if k not in SETTINGS]
    if unknown:
        raise ValidationError(f"{unknown[0]!r} of storage server {server!r} cannot be changed",
                              hint="settable: " + ", ".join(list(SETTINGS) + ["comment"]))
    sizes = {k: options[opt] for k, opt in SETTINGS.items()}
    for key, value in changes.items():
        sizes[key] = parse_size(value, what=key)
    for key, (low, high) in _RANGES.items():
        if key in changes and not low <= sizes[key] <= high:
            raise ValidationError(f"{key} {size_text(sizes[key])} is outside "
                                  f"{size_text(low)} to {size_text(high)}",
                                  hint=f"{key} is {SETTINGS_ABOUT[key]}")
    avg = sizes["avg_chunk"]
    if avg & (avg - 1):
        raise ValidationError(f"avg_chunk {size_text(avg)} is not a power of two",
                              hint="e.g. 128K, 256K, 512K (the default), 1M or 2M")
    if sizes["min_chunk"] % 2:
        raise ValidationError(f"min_chunk {size_text(sizes['min_chunk'])} is odd",
                              hint="give an even size, e.g. a quarter of avg_chunk")
    for small, large in (("min_chunk", "avg_chunk"), ("avg_chunk", "max_chunk")):
        if sizes[small] < sizes[large]:
            continue
        if (small in changes) == (large in changes):
            what = f"{small} {size_text(sizes[small])} must be smaller than {large} " \
                   f"{size_text(sizes[large])}"
        else:
            key, other = (small, large) if small in changes else (large, small)
            what = (f"{key} {size_text(sizes[key])} must be "
                    f"{'smaller' if key == small else 'larger'} than {other}, "
                    f"{size_text(sizes[other])} on the server now")
        avg = _example_average(sizes, changes)
        raise ValidationError(
            what, hint=f"change them together, e.g. `cairn storage-server set {server} "
                       f"min_chunk {size_text(avg // 4, True)} avg_chunk "
                       f"{size_text(avg, True)} max_chunk {size_text(avg * 4, True)}` (a "
                       "quarter and four times the average, as the defaults are)")
    out = dict(options, **{SETTINGS[k]: v for k, v in sizes.items()})
    validate_sizes(out["min_size"], out["avg_size"], out["max_size"], out["normalization"])
    return out


def check_mode(mode, *, host=False):
    """Where a policy's (host=False) or a host's backups into deduplicating pools are cut into
    chunks."""
    allowed = HOST_MODES if host else MODES
    if mode not in allowed:
        raise ValidationError(
            f"deduplication mode {mode!r} is unknown",
            hint="choose server (the client sends a plain stream; the storage server chunks "
                 "it), client (the client chunks and sends only chunks the pool lacks)"
                 + (" or policy (as the policy says)" if host else ""))
    return mode


# Where a policy's backups into a deduplicating pool are compressed: on the storage server as
# it stores each new chunk (the default), on the client before the chunk crosses the network
# (client-side deduplication; the storage server checks each chunk and stores it as it
# came; with server-side deduplication the stream is compressed in transit), or not at all.
# The level is zstd's (zlib's, capped at 9, where zstandard is missing).
COMPRESSION_AT = ("server", "client", "off")
DEFAULT_COMPRESSION = "server"
DEFAULT_LEVEL = 1
LEVEL_RANGE = (1, 19)  # zstd's regular levels; 20-22 need far more memory to decode


def check_compression(at):
    """A policy's compression: server, client or off (True: client, as --compression says;
    False or None: the default)."""
    if at is True:
        return "client"
    if at in (None, False, ""):
        return DEFAULT_COMPRESSION
    at = str(at).strip().lower()
    if at not in COMPRESSION_AT:
        raise ValidationError(
            f"compression {at!r} is unknown",
            hint="choose server (the storage server compresses each new chunk), client (the "
                 "client compresses what it sends: its new chunks, or with server-side "
                 "deduplication its stream) or off (chunks are stored as they are)")
    return at


def check_level(level):
    """A compression level: an integer in LEVEL_RANGE (None: the default)."""
    if level in (None, ""):
        return DEFAULT_LEVEL
    low, high = LEVEL_RANGE
    try:
        n = int(str(level).strip())
    except ValueError:
        n = None
    if n is None or not low <= n <= high:
        raise ValidationError(
            f"compression level {str(level).strip()} is outside {low} to {high}",
            hint=f"give a zstd level from {low} (fastest, the default) to {high} (smallest, "
                 "slowest); 3 to 9 are common choices")
    return n


def compression_refusal(at, storage_type, unit):
    """The ValidationError for compression `at` asked for explicitly on a storage unit of a
    type that does not compress, or None."""
    caps = storage_type.capabilities if storage_type is not None else None
    if at == "off" or caps is None or caps.dedup or caps.compression:
        return None
    return ValidationError(
        f"compression {at} is not available on storage unit {unit!r}: its storage is "
        f"{storage_type.name}, whose images are stored uncompressed; advanced-disk, dedup "
        "and cloud pools compress (on the storage server or on the client)",
        hint="leave out the compression options (or give off), or point the policy at "
             "another storage unit")


def default_compression(storage_types):
    """A new policy's compression when none is given: server where a storage unit it writes
    to deduplicates (chunks are compressed as they are stored, as before the choice
    existed), off where they are all advanced-disk (plain tar files, as before)."""
    if any(t is not None and t.capabilities.dedup for t in storage_types):
        return DEFAULT_COMPRESSION
    return "off"


def compression_of(policy):
    """(where, level) of a policy dict, with the defaults for one made before they existed."""
    at = policy.get("compression")
    return (at if at in COMPRESSION_AT else DEFAULT_COMPRESSION,
            policy.get("compression_level") or DEFAULT_LEVEL)


def effective_mode(policy_mode, host_mode):
    """Where chunking happens for one client of a policy: a client's own setting wins."""
    if host_mode and host_mode != "policy":
        return host_mode
    return policy_mode or "server"


def path_warning(filesystem):
    """A warning for a storage path on a file system a deduplication pool should not use, or
    None. `filesystem`: the agent's description of the path's file system (type, class)."""
    if not filesystem:
        return None
    if filesystem.get("class") in WARN_CLASSES:
        return (f"the storage path is on {filesystem.get('type')} (a network file system, "
                f"mounted from {filesystem.get('device')}): a deduplication pool reads its "
                "containers at random and locks its index, which is slow and not always safe "
                "over NFS or CIFS. Prefer a local or parallel file system such as GPFS.")
    return None


def _mib(n):
    return f"{n / (1 << 20):.1f} MiB"


def summary_text(s):
    """The backup job's line on what an image did to the pool."""
    read = s.get("read_bytes")
    if read is not None and read != s["bytes"]:
        # files taken from the files cache count as data the pool held, unread
        read = f" ({_mib(read)} read, {_mib(s['bytes'] - read)} taken from the files cache)"
    else:
        read = ""
    text = (f"deduplication: {s['dedup_ratio'] if s.get('dedup_ratio') is not None else 0:.1f}% "
            f"of {_mib(s['bytes'])}{read} was in the pool already; {s['new_chunks']} of "
            f"{s['chunks']} chunks new ({_mib(s['new_bytes'])}), {_mib(s['stored_bytes'])} "
            "stored after compression")
    if s.get("sent_bytes") is not None:
        text += f"; the client sent {_mib(s['sent_bytes'])}"
    return text


def compression_text(c):
    """The backup job's line on where its new chunks were compressed."""
    if c["at"] == "off":
        return "compression: off, new chunks were stored as they are"
    if c["at"] == "client":
        return (f"compression: on the client ({c['codec']} level {c['level']}); the storage "
                "server checked each chunk against its fingerprint and stored it as it came")
    text = f"compression: on the storage server ({c['codec']} level {c['level']})"
    if c.get("in_transit"):
        text += f"; the client compressed its stream in transit ({c['in_transit']})"
    return text


class Dedup(StorageType):
    name = TYPE
    description = DESCRIPTION
    needs_path = NEEDS_PATH
    makes_path = True
    image_dir = IMAGE_DIR
    capabilities = Capabilities(dedup=True, encryption=True, reclaim=True, files_cache=True,
                                one_pool=True, import_images=True)
    verifier = "chunks"
    orphans_note = "in a deduplication pool their chunks are freed by the next space reclaim"
    settings = SETTINGS_ABOUT

    def default_options(self):
        return default_options()

    def check_options(self, options):
        return check_options(options)

    def path_warning(self, filesystem):
        return path_warning(filesystem)

    def change_options(self, server, changes):
        """New chunk sizes, for the data of the next backups (change_chunk_sizes)."""
        return self.check_options(change_chunk_sizes(
            server["name"], self.check_options(server.get("options")), changes))

    def settings_values(self, options):
        opts = self.check_options(options)
        return {k: size_text(opts[opt], short=True) for k, opt in SETTINGS.items()}

    def settings_text(self, options):
        return f"chunks of {chunk_text(self.check_options(options))}"

    def create_key(self, home, server_name, options, credentials=None):
        """With encryption at rest the master makes the pool's key (keys.py)."""
        super().create_key(home, server_name, options, credentials)
        if options and options.get("encrypted"):
            keys.create(home, server_name)

    def remove_key(self, home, server_name, options):
        if options and options.get("encrypted"):
            keys.remove(home, server_name)

    def pool_volumes(self, server, volumes, other_pool):
        """A deduplication pool is the storage server's one chunk store: its volume is the
        storage path, and no second pool may share it."""
        if volumes and volumes != [server["path"]]:
            raise ValidationError(
                f"a disk pool of dedup storage server {server['name']!r} has one volume, the "
                f"server's storage path {server['path']}",
                hint="leave out --volume (the storage path is taken), or create another dedup "
                     "storage server for another path")
        if other_pool:
            raise ValidationError(f"dedup storage server {server['name']!r} already has its "
                                  f"disk pool {other_pool!r}",
                                  hint="a deduplication pool is one per storage server")
        return [server["path"]]

    def image_paths(self, volume, client, image_id):
        return image_paths(volume, client, image_id)

    def access(self, server, home):
        """The pool's root, the chunk sizes and, when encrypted, the key."""
        opts = self.check_options(server.get("options"))
        return dict(self.access_without_key(server, home),
                    key=keys.load(home, server["name"]).hex() if opts["encrypted"] else None)

    def warm_spec(self, server, home):
        # the chunk index is read while the backup job prepares (DedupAgent.warm)
        return self.access(server, home)

    def backup_side(self, *, server, pool, home, volume, image_id, policy, client_host):
        return DedupBackup(self, self.access(server, home), pool=pool, volume=volume,
                           image_id=image_id,
                           mode=effective_mode(policy.get("dedup"), client_host.get("dedup")),
                           compression=compression_of(policy))

    def import_images(self, *, server, pool, home, key_file=None):
        """Recipes are read with the pool's key: the one in key_file when given (kept by the
        master once it opened the pool), else the master's."""
        opts = self.check_options(server.get("options"))
        if key_file is None:
            try:
                access = self.access(server, home)
            except keys.KeyMissing as e:
                raise keys.KeyMissing(
                    e.message, hint="give the pool's key with --key-file F (the file that "
                                    "holds its 64 hex digits), or recover the master's keys "
                                    "with `cairn catalog recover`") from None
            return DedupImport(self, access, pool=pool, server=server)
        if not opts["encrypted"]:
            raise ValidationError(
                f"storage server {server['name']} is not encrypted at rest: its pool needs no "
                "key file",
                hint="import without --key-file; if the pool on disk is encrypted, create the "
                     "storage server again with --encrypt and give its key with --key-file")
        key = keys.read_file(key_file)
        access = dict(self.access_without_key(server, home), key=key.hex())
        return DedupImport(self, access, pool=pool, server=server, key=key, key_file=key_file)

    def access_without_key(self, server, home):
        opts = self.check_options(server.get("options"))
        return {"type": self.name, "root": server["path"],
                "params": {k: opts[k] for k in CHUNK_PARAMS}, "key": None}

    def duplicate_side(self, *, server, pool, home, volume, image_id, source=None):
        """A copy arrives as a recipe and the chunks the pool lacks (from a pool that keeps
        chunks), or as a stream that the storage side deduplicates (server-side: the sending
        storage host never cuts chunks for it)."""
        return DedupBackup(self, self.access(server, home), pool=pool, volume=volume,
                           image_id=image_id, mode="server")

    def expired(self, image):
        if not image.get("dedup"):
            return super().expired(image)
        return (f"image {image['id']} ({image['schedule_type']}, {image['created']}) removed "
                f"from deduplication pool {image['pool']}: the chunks only it used are freed "
                "by space reclaim", True)


class DedupBackup(BackupSide):
    """A backup into a deduplication pool: where chunking happens (mode), and the pool's
    statistics of the image."""

    def __init__(self, storage_type, access, *, pool, volume, image_id, mode,
                 compression=None):
        super().__init__(storage_type, access, pool=pool, volume=volume, image_id=image_id)
        self.access["mode"] = mode
        self.access["image_id"] = image_id
        # (where, level): the policy's; a copy's chunks are compressed as the pool does
        self.compression = compression or (DEFAULT_COMPRESSION, DEFAULT_LEVEL)
        at, level = self.compression
        self.access["compression"] = {"at": at, "level": level}
        self.codecs = None  # what the storage side decodes of chunks a client compressed

    def heard(self, listening):
        self.codecs = listening.get("codecs")

    def compresses_on_client(self):
        """Whether the client is told to compress: the policy says so and the storage
        side said which codecs it decodes (it is not the client's own host)."""
        return self.compression[0] == "client" and bool(self.codecs)

    def compression_plan(self, local=False):
        """The log line on where this backup's new chunks are to be compressed."""
        at, level = self.compression
        if at == "off":
            return "compression: off, new chunks are stored as they are"
        if at == "client" and not local and self.compresses_on_client():
            if self.access["mode"] == "client":
                return (f"compression: on the client (level {level}) before the chunks cross "
                        "the network; the storage server checks each against its fingerprint "
                        "and stores it as it came")
            if "zstd" in self.codecs:
                return (f"compression: the client compresses its stream in transit (level "
                        f"{level}); with server-side deduplication the storage server "
                        f"compresses the chunks it stores (level {level})")
        why = ("" if at == "server" else
               " (the policy asks for the client: the client is the storage host)" if local
               else " (the policy asks for the client: the storage server cannot decode a "
                    "compressed stream)")
        return f"compression: on the storage server (level {level}){why}"

    def placed_text(self):
        # the chunk sizes of this backup: the server's may change between backups
        return (f"image {self.image_id} goes to deduplication pool {self.pool['name']} "
                f"({self.volume})" + (", encrypted at rest" if self.access.get("key") else "")
                + f", chunks of {chunk_text(self.access['params'])}")

    def local_text(self):
        return ("client and storage server are the same host: the client's agent "
                "deduplicates into the pool directly; " + self.compression_plan(local=True))

    def client_spec(self):
        # The client learns how to cut chunks, never the pool's path or key.
        spec = {"type": self.type.name, "mode": self.access["mode"],
                "params": self.access["params"]}
        if self.compresses_on_client():
            spec["compression"] = {"level": self.compression[1], "codecs": self.codecs}
        return spec

    def client_text(self):
        return ("client-side deduplication: the client sends only chunks the pool lacks"
                if self.access["mode"] == "client" else
                "server-side deduplication: the client sends a plain stream") + \
            "; " + self.compression_plan()

    def excludes(self):
        # Backing up the pool's own images into the pool helps nobody and grows forever.
        return {v: f"deduplication pool {self.pool['name']}" for v in self.pool["volumes"]}

    def outcome(self, summary, received):
        stats = summary.get("dedup") or received.get("dedup")
        if summary.get("client_dedup"):
            stats["sent_bytes"] = summary["client_dedup"]["sent_bytes"]
        elif summary.get("client_stream"):  # a stream compressed in transit
            stats["sent_bytes"] = summary["client_stream"]["sent_bytes"]
        stats["mode"] = ((summary.get("dedup_mode") or self.access["mode"])
                         if received is not None else "local")
        return stats

    def stored_bytes(self, stats):
        return stats["stored_bytes"] if stats else 0

    def catalog_fields(self, stats):
        return {"dedup": json.dumps(stats) if stats else None}

    def rate(self, stats):
        return stats.get("dedup_ratio")

    def result_texts(self, stats):
        if stats is None:
            return []
        return [summary_text(stats)] + ([compression_text(stats["compression"])]
                                        if stats.get("compression") else [])


class DedupImport(ImportSide):
    """An import of a deduplication pool's recipes: with the key given, or the master's; the
    statistics a version 2 recipe keeps of what its image added to the pool."""

    def __init__(self, storage_type, access, *, pool, server, key=None, key_file=None):
        super().__init__(storage_type, access, pool=pool)
        self.server = server
        self.key = key
        self.key_file = key_file

    def reading_text(self):
        how = (f", encrypted: read with the key in {self.key_file}" if self.key is not None
               else ", encrypted: read with the master's key" if self.access.get("key")
               else "")
        return (f"reading the recipes of deduplication pool {self.pool['name']} "
                f"({self.server['path']}){how}")

    def failure_hint(self):
        if self.key is not None:
            return (f"the key in {self.key_file} is refused: give the file holding the key "
                    "this pool was created with (64 hex digits)")
        if self.access.get("key"):
            return ("the master's key of storage server "
                    f"{self.server['name']} is not this pool's (a storage server created "
                    "again makes a new key): give the pool's key with --key-file F, or "
                    "recover the master's keys from a catalog backup (`cairn catalog "
                    "recover`)")
        return ("a pool encrypted at rest is read with its key: create the storage server "
                "again with --encrypt, and import with --key-file F")

    def problem(self, found):
        meta = (found.get("store") or {}).get("meta") or {}
        if meta.get("image_id") != found["id"]:
            return (f"its recipe is of image {meta.get('image_id')!r:.80}, not of image "
                    f"{found['id']}")
        stats = meta.get("stats")
        if stats is not None and not (isinstance(stats, dict) and all(
                type(stats.get(k)) is int and stats[k] >= 0
                for k in ("bytes", "chunks", "new_chunks", "new_bytes", "stored_bytes"))):
            return "its recipe's statistics are not valid"
        return None

    def catalog_fields(self, found):
        store = found["store"]
        stats = store["meta"].get("stats")
        if stats is None:
            return {"image_bytes": found["bytes"],
                    "dedup": json.dumps({"bytes": store.get("stream_bytes"),
                                         "chunks": store.get("chunks")})}
        return {"image_bytes": found["bytes"] + stats["stored_bytes"],
                "dedup": json.dumps(dict(stats, recipe_bytes=found["bytes"]))}

    def lacks(self, found):
        if found["store"]["meta"].get("stats") is None:
            return [f"what it added to the pool (its recipe is of version "
                    f"{found['store'].get('version')})"]
        return []

    def keep_key(self, home):
        if self.key is None:
            return None
        return keys.adopt(home, self.server["name"], self.key)


DEDUP = Dedup()
