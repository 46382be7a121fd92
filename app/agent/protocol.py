"""The control protocol between master and agent: one JSON document per line on the agent's
stdin (requests) and stdout (everything the agent says).

  request   {"id": 7, "op": "backup", "args": {...}}
  event     {"id": 7, "event": "progress", "data": {...}}     zero or more, while it runs
  result    {"id": 7, "result": {...}}                         exactly one of these two ends it
  error     {"id": 7, "error": {"code": 40, "message": "..."}}

Requests run concurrently; {"op": "cancel", "args": {"id": 7}} asks request 7 to stop.
Strings carry file names that are not UTF-8 as surrogate escapes (\\udcXX in JSON), which
both ends turn back into the exact bytes with os.fsencode."""

import json

PROTOCOL_VERSION = 1


def encode(msg):
    # ensure_ascii keeps surrogate escapes representable; separators keep lines short.
    return (json.dumps(msg, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def decode(line):
    return json.loads(line.decode("utf-8", "surrogateescape"))
