"""What a backup image says about itself (docs/image-format.md): the metadata members that
let a master that lost its catalog record the image again from the pool alone (`cairn
disk-pool import`), the version of that format, and the checks a description read from a pool
must pass before anything of it is believed.

An image's own members, in image order:
  * `.cairn/image.json` (first): the image metadata the master passed to the backup;
  * the backed-up entries;
  * `.cairn/summary.json` (format 2 on): what the backup found at its end (files, bytes,
    warnings, the snapshots it read from and how its file list was made) and, in images made
    since, the client's names of the files' owners and groups (app/formats/owners.py);
  * `.cairn/index.jsonl` (last): the file index, one row per entry.

Format 1 images have no summary member, and their image.json lacks the expiry, the retention,
the storage unit and pool, and a multi-stream backup's stream and set. Format 3 incrementals
list an unchanged entry with a short row [path, -1] in their index (app/formats/entry.py);
format 2 ones with a whole row. Readers read all three.

Standard library only: master and agents share it."""

import json
import re

from app.formats import entry, owners
from app.formats.tarfmt import PIECE_HASHES

FORMAT = "cairn-image"
FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

META_NAME = b".cairn/image.json"
SUMMARY_NAME = b".cairn/summary.json"
INDEX_NAME = b".cairn/index.jsonl"
# Larger metadata members are not read: no backup writes one of this size.
META_LIMIT = 1 << 20
# image.json is padded with spaces to a multiple of this: its length, and so the offset of
# every later member, stays the same from one backup to the next although the job and image
# ids grow a digit now and then. An unchanged full then finds its index's chunks in the pool.
META_STEP = 4096
# The summary holds the owner names (app/formats/owners.py bounds them).
SUMMARY_LIMIT = 1 << 20

LEVELS = ("full", "differential", "cumulative")
# What the catalog calls a host, policy, schedule, storage unit or pool (app/config.py).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
# An image id as backups make them (CLIENT_SECONDS_JOB, with .N when taken): also a file name
# in the master's state directory, so nothing else is accepted.
ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
# The fields a format 1 image.json lacks, by name, for what an import says of such an image.
ADDED_IN_2 = ("expires", "retention_s", "storage_unit", "pool", "stream", "set")
# The summary's counters (format 2).
SUMMARY_COUNTS = ("files", "dirs", "bytes", "warnings", "unchanged", "unchanged_bytes",
                  "reused", "reused_bytes")


def meta_text(meta):
    """image.json's text: the metadata as sorted JSON, padded with spaces to a multiple of
    META_STEP and ended with a newline (JSON readers skip the spaces)."""
    text = json.dumps(meta, indent=1, sort_keys=True).encode("utf-8")
    return text + b" " * (-(len(text) + 1) % META_STEP) + b"\n"


def valid_id(value):
    return isinstance(value, str) and bool(ID_RE.match(value)) and ".." not in value


def _name(value, optional=False):
    if value is None and optional:
        return True
    return isinstance(value, str) and bool(NAME_RE.match(value))


def _path(value):
    return (isinstance(value, str) and value.startswith("/") and "\0" not in value
            and len(value) <= 4096)


def _int(value, optional=False):
    if value is None and optional:
        return True
    return type(value) is int and value >= 0


def meta_problem(meta, *, file_id, client_dir):
    """Why an image.json read from a pool file cannot be believed, or None. file_id: the image
    id its file name gives; client_dir: the client folder it lies in. A hostile image (ids or
    names that would lead out of the master's folders, values of the wrong kind) is refused
    here, before any of it is used."""
    if not isinstance(meta, dict):
        return "its .cairn/image.json is not a JSON object"
    if meta.get("format") != FORMAT:
        return (f"its .cairn/image.json is not Cairn's image metadata "
                f"(format {meta.get('format')!r})")
    version = meta.get("format_version")
    if version not in READABLE_VERSIONS:
        return (f"its metadata has format version {version!r}; this Cairn reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}")
    iid = meta.get("image_id")
    if not valid_id(iid):
        return f"its metadata names image id {iid!r}, which is not an image id Cairn makes"
    if iid != file_id:
        return f"the file of image {file_id} holds image {iid}"
    checks = (
        ("client", _name(meta.get("client"))),
        ("policy", _name(meta.get("policy"))),
        ("schedule", _name(meta.get("schedule"))),
        ("schedule_type", meta.get("schedule_type") in LEVELS),
        ("checksum", meta.get("checksum") in PIECE_HASHES),
        ("created", isinstance(meta.get("created"), str) and len(meta["created"]) <= 40),
        ("selections", isinstance(meta.get("selections"), list) and meta["selections"]
         and all(_path(s) for s in meta["selections"])),
        ("base_image", meta.get("base_image") is None or (
            valid_id(meta["base_image"]) and meta["base_image"] != iid)),
        ("job_id", _int(meta.get("job_id"), optional=True)),
        ("expires", meta.get("expires") is None or (
            isinstance(meta["expires"], str) and len(meta["expires"]) <= 40)),
        ("retention_s", _int(meta.get("retention_s"), optional=True)),
        ("storage_unit", _name(meta.get("storage_unit"), optional=True)),
        ("pool", _name(meta.get("pool"), optional=True)),
        ("stream", meta.get("stream") is None or (
            isinstance(meta["stream"], str) and len(meta["stream"]) <= 65536)),
        ("set", meta.get("set") is None or _set_ok(meta["set"], iid)),
    )
    bad = [k for k, ok in checks if not ok]
    if bad:
        return (f"its metadata has invalid {', '.join(bad)} "
                f"({', '.join(f'{k}={meta.get(k)!r:.80}' for k in bad)})")
    if meta["client"] != client_dir:
        return (f"its metadata names client {meta['client']}, but it lies in the folder of "
                f"client {client_dir}")
    return None


def _set_ok(s, iid):
    return (isinstance(s, dict) and valid_id(s.get("id")) and s["id"] != iid
            and type(s.get("streams")) is int and 0 < s["streams"] <= 4096
            and isinstance(s.get("selections"), list)
            and all(_path(p) or p == "NEW_STREAM" for p in s["selections"]))


def summary_problem(summary):
    """Why a summary member cannot be believed, or None."""
    if not isinstance(summary, dict):
        return "its .cairn/summary.json is not a JSON object"
    bad = [k for k in SUMMARY_COUNTS if not _int(summary.get(k), optional=True)]
    for k in ("snapshots",):
        if summary.get(k) is not None and not isinstance(summary[k], list):
            bad.append(k)
    if summary.get("scan") is not None and not isinstance(summary["scan"], dict):
        bad.append("scan")
    if bad:
        return f"its .cairn/summary.json has invalid {', '.join(bad)}"
    if summary.get("owners") is not None:
        why = owners.problem(summary["owners"])
        if why:
            return f"its .cairn/summary.json: {why}"
    return None


def row_problem(row):
    """Why a row of a trailing index read for an import names a path no backup writes, or
    None (the row's shape is checked by the reader first)."""
    path = row[entry.PATH]
    if path == "/":
        return None
    parts = path.split("/")[1:]
    if any(p in ("", ".", "..") for p in parts) or "\0" in path:
        return f"a row names the path {path!r:.200}, which no backup writes"
    return None
