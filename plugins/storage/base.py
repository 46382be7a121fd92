"""The storage-type interface: the one seam between Cairn's jobs and the ways a pool keeps its
images. Jobs and agent operations never ask which type they talk to; they ask the type.

A storage type has two halves.

Master half (this module's StorageType; one object per type, registered in
plugins/storage/registry.py, not in the package's face: the agent imports the agent halves
below plugins/storage/, so that face holds nothing of the master): what the master decides
and says.
  - name, description, needs_path (a storage server of the type needs --path), makes_path
    (creating the server creates and checks that path on its host), image_dir (the folder of
    images under each volume), capabilities (below), verifier (below), orphans_note.
  - options: default_options(), check_options(options) (refuses options a type has none
    of), path_warning(file system) for a storage path, create_key/remove_key (the key of a
    pool encrypted at rest, kept by the master, never in the pool); settings (the keys
    `cairn storage-server set` changes on an existing server, dedup: its chunk sizes) and
    change_options(server, changes), settings_values(options), settings_text(options).
  - volumes: pool_volumes(server, volumes, other pool) (which volumes a new pool of the
    server has), choose_volume(stats, high water, images per volume), image_paths(volume,
    client, image id) -> (partial, final).
  - access(server, home): the storage spec, an opaque dict with the type's name under "type",
    that the storage host's agent needs to use the pool (AdvancedDisk: nothing more; dedup:
    the pool root, the chunk sizes and, when encrypted, the key). Restore, rebuild-index,
    commit, verify, reclaim, usage and the chunk-index rebuild all pass it as is.
  - backup_side(...): a BackupSide for one backup job: the spec for the storage side (a file
    sink when client and storage are one host, else the receiving side), the client's part
    (dedup: where chunking happens and the chunk sizes, never the key), the excludes of the
    pool's own files when the client is the storage host, what the storage side reports (the
    image's pool statistics), the commit's spec, and the job log's texts.
  - duplicate_side(...): a BackupSide for a copy of an image arriving from another pool (a
    lifecycle's duplication): the same seam as a backup, the sending side being the source
    pool's storage host, never a client.
  - expired(image): the expire job's line for a removed image, and whether the pool wants a
    space reclaim afterwards.
  - import_images(server, pool, home, key_file): an ImportSide (below) for one import job,
    which records the images of a pool that the catalog does not know from what each image
    says about itself (`cairn disk-pool import`, app/jobs/pool_import.py): the storage spec
    to read them with (an encrypted pool's key, the master's or one given in a key file),
    the catalog columns the type fills from what its agent half found, what an image of an
    older format lacks, and keeping a given key once it opened the pool.

Capabilities say what a type can do, so that jobs, the CLI and the console ask for an ability,
never for a type: dedup (chunks stored once; a backup reports its deduplication rate;
policies and hosts choose where chunking happens), encryption (at rest, with a key the master
keeps), reclaim (space reclaim, chunk usage, chunk-index rebuild, a compaction threshold),
files_cache (a full takes unchanged files from the newest image without reading them),
one_pool (the server holds one pool, whose volume is its storage path; a type with a
bucket: its cache), bucket (the pool lives in an S3 bucket behind a local cache: a server
takes an endpoint, a bucket and its credentials), compression (a policy may have its images
compressed, on the storage server or on the client: advanced-disk, whose images become
zstd-compressed tar files; deduplicating types compress their chunks), suspend (a running
backup can be suspended and resumed where it stopped: no type yet; queued jobs of every type
can be held) and import_images (a pool's images can be recorded again from the pool alone).

verifier names how a verify job reads the type's images back: "members" (app/jobs/
disk_verify.py: every member the catalog index lists, in the image files) or "chunks"
(app/jobs/chunk_verify.py: every chunk against its fingerprint, then the damaged byte ranges
as files). A new type picks the one that fits its images.

Agent half (plugins/storage/agent_base.py's AgentStorage, registered in
plugins/storage/agents.py): what an agent does with a storage spec, chosen by its "type":
the sink of a backup written on the storage host itself, the client's sink over the data
plane, the receiving side, the commit, the restore source (also read by rebuild-index), and
verify, reclaim, usage and the chunk-index rebuild. The agent halves travel to every host
(app/transport/bundle.py); the master halves (each type's master.py) and the keys stay on
the master.

docs/storage-types.md says the same for people adding a type, and how the conformance suite
(tests/storage/) holds every registered type to the same behaviour."""

import abc
import posixpath
from dataclasses import dataclass
from typing import Optional

from app.errors import CairnError, ValidationError


@dataclass(frozen=True)
class Capabilities:
    """What a storage type can do (see the module's docstring)."""
    dedup: bool = False
    encryption: bool = False
    reclaim: bool = False
    files_cache: bool = False
    one_pool: bool = False
    suspend: bool = False
    import_images: bool = False
    bucket: bool = False
    compression: bool = False


# Volumes whose free space is within this of the most free one count as equally free.
SPREAD_SLACK = 1 << 30


def choose_volume(volume_stats, high_water, images_per_volume=None):
    """Pick a volume below the high-water mark: the one with the most free space, and among
    volumes within a GiB of that (several directories of one file system, say) the one
    holding the fewest images, so that images spread over the pool.

    volume_stats: list of dicts {"path", "ok", "size", "free", "error"} from the agent.
    Returns (volume path, None) or (None, reason)."""
    images_per_volume = images_per_volume or {}
    usable = []
    reasons = []
    for v in volume_stats:
        if not v.get("ok"):
            reasons.append(f"{v['path']}: {v.get('error') or 'unavailable'}")
            continue
        used_pct = 100.0 * (v["size"] - v["free"]) / v["size"] if v["size"] else 100.0
        if used_pct >= high_water:
            reasons.append(f"{v['path']} is {used_pct:.0f}% full (high-water mark {high_water}%)")
            continue
        usable.append(v)
    if not usable:
        return None, "; ".join(reasons) or "the disk pool has no volumes"
    most = max(v["free"] for v in usable)
    close = [v for v in usable if most - v["free"] <= SPREAD_SLACK]
    best = min(close, key=lambda v: (images_per_volume.get(v["path"], 0), -v["free"]))
    return best["path"], None


def image_paths_in(volume, image_dir, client, image_id, suffix):
    """(partial, final) path of an image file of a client under a volume's image folder. The
    partial name starts with a dot so that nobody mistakes it for a committed image."""
    d = posixpath.join(volume, image_dir, client)
    return (posixpath.join(d, f".{image_id}{suffix}.partial"),
            posixpath.join(d, f"{image_id}{suffix}"))


class StorageType(abc.ABC):
    """The master half of a storage type (see the module's docstring)."""

    name: str = ""
    description: str = ""
    needs_path: bool = False
    makes_path: bool = False
    image_dir: str = ""
    capabilities: Capabilities = Capabilities()
    verifier: str = "members"
    # What a cleanup adds once it removed orphan files of such a pool, or None.
    orphans_note: Optional[str] = None

    # ---- options and servers ----------------------------------------------------------------
    def default_options(self):
        """A new storage server's options when none are given (None: the type has none)."""
        return None

    def check_options(self, options):
        """The options completed and checked, or refused; returns what the catalog keeps."""
        if options:
            raise ValidationError(f"a {self.name} storage server has no options "
                                  f"({', '.join(sorted(options))})")
        return options

    def path_warning(self, filesystem):
        """A warning for a storage path on this file system (the agent's description of it),
        or None."""
        return None

    def default_path(self, server_name):
        """The storage path of a new server when none is given, or None."""
        return None

    def create_key(self, home, server_name, options, credentials=None):
        """Makes what a new server's options need the master to keep (an encryption key, a
        bucket's credentials)."""
        if credentials is not None:
            raise ValidationError(f"a {self.name} storage server takes no credentials",
                                  hint="leave out the credentials file")

    def check_server(self, call, server, home):
        """Checks a new server on its host beyond its path, with call(op, args) to its
        agent; returns warnings."""
        return []

    def remove_key(self, home, server_name, options):
        """Undoes create_key when the server could not be recorded."""

    # What `cairn storage-server set` may change on an existing server: {key: what it is}.
    settings: dict = {}

    def change_options(self, server, changes):
        """The server's options with `changes` ({settings key: value}) applied and checked as
        at creation (check_options), or refused naming the key and what is wrong. Nothing is
        written here: the caller keeps what comes back."""
        if changes:
            raise ValidationError(f"a {self.name} storage server has no settings to change "
                                  f"({', '.join(sorted(changes))})")
        return self.check_options(server.get("options"))

    def settings_values(self, options):
        """{key: value} of the settings as change_options reads them back (the console's
        editors)."""
        return {}

    def settings_text(self, options):
        """The settings' values in words, for the line a change prints; "" when none."""
        return ""

    # ---- pools and images ---------------------------------------------------------------------
    def pool_volumes(self, server, volumes, other_pool):
        """The volumes of a new disk pool of `server` (absolute paths as given); other_pool:
        the name of a pool the server has already, or None."""
        return volumes

    def choose_volume(self, volume_stats, high_water, images_per_volume=None):
        """The volume a new image goes to: see choose_volume()."""
        return choose_volume(volume_stats, high_water, images_per_volume)

    @abc.abstractmethod
    def image_paths(self, volume, client, image_id):
        """(partial path, final path) of a new image on a volume."""

    def access(self, server, home):
        """The storage spec: what the storage host's agent needs to use the server's pool."""
        return {"type": self.name}

    def warm_spec(self, server, home):
        """The spec with which the storage host's agent opens the pool ahead of a backup
        (AgentStorage.warm, the agent's pool_open), or None when there is nothing to open."""
        return None

    @abc.abstractmethod
    def backup_side(self, *, server, pool, home, volume, image_id, policy, client_host):
        """A BackupSide for one backup job into the server's pool."""

    def duplicate_side(self, *, server, pool, home, volume, image_id, source=None):
        """A BackupSide for a copy of an image that arrives from another pool (a lifecycle's
        duplication, app/jobs/duplicate.py, or a repair): source, the catalog's record of the
        copy it comes from or replaces (its "compression": an advanced-disk copy is
        compressed as that one is); the receiving side's spec (storage_spec), what
        the sending storage host's agent needs (client_spec), the commit's spec and the copy's
        statistics, as for a backup."""
        raise NotImplementedError

    def expired(self, image):
        """(log line, whether the pool wants a space reclaim) for an image an expire job
        removed."""
        return (f"image {image['id']} ({image['schedule_type']}, {image['created']}) removed: "
                f"{image['image_bytes']} bytes freed on {image['storage_host']}", False)

    def import_images(self, *, server, pool, home, key_file=None):
        """An ImportSide for an import of the pool's images (see the module's docstring).
        key_file: a file holding the pool's key, for a type with encryption at rest."""
        if not self.capabilities.import_images:
            raise CairnError(f"importing the images of a {self.name} pool is not available in "
                             "this version",
                             hint="back the data up again into the pool instead")
        if key_file is not None:
            raise ValidationError(f"disk pool {pool['name']} is not encrypted at rest: it "
                                  "needs no key file",
                                  hint="import it without --key-file")
        return ImportSide(self, self.access(server, home), pool=pool)


class BackupSide:
    """The storage side of one backup job, made by StorageType.backup_side. The backup job
    (app/jobs/backup.py) asks it what to send to the agents and what to log; `access` is the
    storage spec (StorageType.access) this job adds to."""

    def __init__(self, storage_type, access, *, pool, volume, image_id):
        self.type = storage_type
        self.base_access = dict(access)
        self.access = dict(access)
        self.pool = pool
        self.volume = volume
        self.image_id = image_id

    @property
    def files_cache(self):
        """Whether a full may take unchanged files from the newest image (see
        use_files_cache)."""
        return self.type.capabilities.files_cache

    def use_files_cache(self, paths):
        """The image files of the files cache's base images (source 0, 1, ...)."""
        self.access["bases"] = paths

    def placed_text(self):
        return f"image {self.image_id} goes to volume {self.volume}"

    def local_text(self):
        """The log line when the client is the storage host and writes the image itself."""
        return "client and storage server are the same host: writing the image directly"

    def storage_spec(self):
        """The spec of the storage host's agent for this backup: its file sink (same host) or
        its receiving side."""
        return self.access

    def heard(self, listening):
        """What the storage side's listening event said (the backup job passes it on before
        it asks for client_spec)."""

    def client_spec(self):
        """What the client's agent needs to send the image over the data plane."""
        return {"type": self.type.name}

    def client_text(self):
        """A log line on how the client sends the image, or None."""
        return None

    def excludes(self):
        """{path: why} that a backup of the storage host itself leaves out: the pool's own
        files."""
        return {posixpath.join(v, self.type.image_dir):
                f"the image directory of disk pool {self.pool['name']}"
                for v in self.pool["volumes"]}

    def outcome(self, summary, received):
        """The image's statistics in its pool for the catalog (None when the type keeps
        none). summary: the client's backup summary; received: the storage side's result,
        None when the client wrote the image itself."""
        return None

    def commit_spec(self):
        """The spec of the storage host's agent for the commit: the pool's, without what this
        backup added."""
        return self.base_access

    # The most seconds the commit may take (a rename and an fsync), or None: no limit.
    commit_timeout = 300

    def stored_bytes(self, stats):
        """What the image added to the pool beyond its own file (the catalog's image_bytes
        adds it)."""
        return 0

    def catalog_fields(self, stats):
        """Columns of the image's catalog row that the type fills."""
        return {}

    def rate(self, stats):
        """The job's deduplication rate in percent, or None."""
        return None

    def result_texts(self, stats):
        """Log lines on what the image did to the pool, once it is committed."""
        return []

    def committed_texts(self, committed):
        """Log lines on what the commit reported (the storage agent's commit result)."""
        return []


class ImportSide:
    """The storage side of one import job, made by StorageType.import_images: how the job
    reads the pool's images, and what the type adds to their catalog rows. `found` is what
    the storage host's agent read of one image (app/agent/pool_import.py): its file's
    "bytes", and under "store" what the type's agent half keeps beside the stream
    (AgentStorage.image_info)."""

    def __init__(self, storage_type, access, *, pool):
        self.type = storage_type
        self.access = dict(access)
        self.pool = pool

    def storage_spec(self):
        """The spec of the storage host's agent that reads the images."""
        return self.access

    def reading_text(self):
        """The job log's line on how the images are read."""
        return (f"reading the images of disk pool {self.pool['name']} "
                f"({', '.join(self.pool['volumes'])})")

    def problem(self, found):
        """Why what the type keeps about the image contradicts it, or None."""
        return None

    def failure_hint(self):
        """What to do when the pool's images cannot be read at all, or None."""
        return None

    def catalog_fields(self, found):
        """Columns of the image's catalog row that the type fills."""
        return {"image_bytes": found["bytes"]}

    def lacks(self, found):
        """What an image of an older format of the type does not carry, in words."""
        return []

    def keep_key(self, home):
        """After the import read the pool: keeps a key it was given (a log line saying so),
        or None."""
        return None
