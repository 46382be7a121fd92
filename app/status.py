"""Job status codes: the one table. 0 is success; every other code names what went wrong.
The README's status table is generated from STATUS_TEXT (see `cairn status-codes`)."""

OK = 0
PARTIAL = 1              # the job finished, but some files were skipped: see its log
INVALID_REQUEST = 10     # the request names something that does not exist or is not allowed
PERMISSION_DENIED = 11   # the Cairn user's role or grants do not allow the request
HOST_UNREACHABLE = 20
AUTH_FAILED = 21
HOST_KEY_UNKNOWN = 22
HOST_KEY_CHANGED = 23
NO_PYTHON = 24
AGENT_FAILED = 25
NOTHING_TO_BACKUP = 30
SNAPSHOT_FAILED = 31      # the file system snapshot a policy asks for could not be taken
STORAGE_WRITE_FAILED = 40
POOL_FULL = 41
VOLUME_UNAVAILABLE = 42
POOL_BUSY = 43            # space reclaim runs on the deduplication pool, or jobs use it
POOL_EXPOSED = 44         # a verify found a pool's files open to other users (now private)
DATA_PLANE_FAILED = 50
RESTORE_TARGET_INVALID = 60
CHECKSUM_MISMATCH = 61
IMAGE_DAMAGED = 62
CATALOG_FAILED = 70       # the catalog file is damaged, unreadable or locked: see catalog check
CANCELED = 150
WINDOW_CLOSED = 196     # a scheduled job could not start before its start window closed
INTERNAL = 99

STATUS_TEXT = {
    OK: "the requested operation was successfully completed",
    PARTIAL: "partially successful: some files were skipped or could not be restored (see the job log)",
    INVALID_REQUEST: "invalid request: a name, path or value was rejected",
    PERMISSION_DENIED: "refused: the Cairn user's role or grants do not allow it (see `cairn user list`)",
    HOST_UNREACHABLE: "the host could not be reached (address, port, network or sshd down)",
    AUTH_FAILED: "the host refused the SSH authentication (user, key or password)",
    HOST_KEY_UNKNOWN: "the host's SSH key is not trusted yet",
    HOST_KEY_CHANGED: "the host's SSH key differs from the trusted one",
    NO_PYTHON: "the host has no python3 of version 3.9 or newer",
    AGENT_FAILED: "the agent on the host failed or stopped answering",
    NOTHING_TO_BACKUP: "none of the backup selections exist on the client",
    SNAPSHOT_FAILED: "the file system snapshot the policy asks for could not be taken",
    STORAGE_WRITE_FAILED: "writing to the storage failed (disk full or I/O error)",
    POOL_FULL: "the disk pool is above its high-water mark",
    VOLUME_UNAVAILABLE: "a disk pool volume is missing, not a directory or not writable",
    POOL_BUSY: "the deduplication pool is busy: space reclaim runs, or jobs use it",
    POOL_EXPOSED: "the pool's files or folders were open to other users (made private again; see the job log)",
    DATA_PLANE_FAILED: "the data connection between client and storage server failed",
    RESTORE_TARGET_INVALID: "the restore target is not usable",
    CHECKSUM_MISMATCH: "data did not match the checksum or fingerprint recorded at backup "
                       "(a restore: the files whose data is damaged were not restored and are "
                       "named in the job log; every other file was)",
    IMAGE_DAMAGED: "the backup image is missing or damaged",
    CATALOG_FAILED: "the catalog is damaged or cannot be used (see `cairn catalog check`)",
    INTERNAL: "internal error (see the job log)",
    CANCELED: "canceled by the administrator",
    WINDOW_CLOSED: "not started: the schedule's start window closed before the job could start (missed)",
}


def text(code):
    return STATUS_TEXT.get(code, "unknown status")
