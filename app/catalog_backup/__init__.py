"""Catalog protection: the master's own state (the catalog, its file indexes, known_hosts and
the keys of encrypted pools) written as one self-describing archive to a pool, and a master
recovered from such an archive on a new machine.

  escrow.py   the passphrase, the escrow key pair and the sealing of the pool keys
  archive.py  the archive's format: its names, its manifest, writing and checking it
  place.py    where an archive goes on a pool (local or over SSH), written partial, then
              committed durably under its final name
  recover.py  finding the newest complete archive under a folder and restoring a home

The job that writes an archive is app/jobs/catalog_backup.py; the master API's part is
app/master/catalog.py."""
