"""What the master and the agent share: the image format (tarfmt, entry), the change digests
an incremental compares (changes), the control protocol (protocol), the owner names an image
records (owners), the names and modes of pool files (poolfiles, private), inode flags (fflags),
sizes as admins write them (sizes) and the I/O helpers of pool writers (directio,
writeback). Standard library only, importing nothing of Cairn but app.errors and
app.status: the agent carries this package to every host, and the master reads what the
agent writes with the same code."""
