"""Backup data mover: writes one advanced-disk image, a POSIX pax tar that GNU tar can list and
extract by itself (see docs/image-format.md).

Image order: `.cairn/image.json`, then the backed-up entries, then `.cairn/summary.json` (what
the backup found), then `.cairn/index.jsonl` (one row per entry, see app/formats/entry.py),
then the end-of-archive marker (app/formats/imagemeta.py). Entries are written
directory by directory: all direct children of a directory form one contiguous run sorted by
name bytes, then each child directory follows in the same order. The catalog's directory
index depends on that.

Standard library only: this runs on client hosts.

The parts, one module each:
- backup.py: backup_to and the state of one backup as it runs, with its events;
- walk.py: the selections and the walk, directory by directory;
- members.py: each entry's member and row, and what an incremental or a files cache leaves out;
- filedata.py: a regular file's member, with its data and holes;
- metadata.py: owner names, extended attributes and inode flags;
- index.py: the rows, sent in batches and written as the `.cairn/index.jsonl` member after
  the `.cairn/summary.json` member;
- output.py: the image byte stream, its buffers and the hash worker's jobs;
- totals.py: what the selections hold, for percent done and time left;
- common.py: the sizes and intervals the parts share.
"""

from app.agent.archiver.backup import backup_to

__all__ = ["backup_to"]
