"""The master API over SSH: `cairn master serve --stdio` serves it as line-delimited JSON on
stdin/stdout, and RemoteMaster, on the admin's desktop, reaches it over SSH and stands for a
Master: the CLI (`cairn --master [USER@]HOST[:PORT] ...`) and the console call it as they
call the embedded one.

  codec.py    values and errors on the wire: what the API returns (dicts, lists, rows,
              tuples, bytes, dicts keyed by numbers) made JSON and back; Cairn's errors kept
  streams.py  what a subscription pushes: the job change feed, a job's log, a job's progress
  server.py   the served side: which calls are served, one thread per request, batches,
              subscriptions
  target.py   [USER@]HOST[:PORT], as the command line names a master
  errors.py   a lost connection, a part of the master that is not served
  client.py   RemoteMaster: the SSH connection (host key checked as hosts' are), calls,
              batches, subscriptions

Nothing here imports a POSIX-only module at import time: the console's side runs on
Windows and macOS too."""
