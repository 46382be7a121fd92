"""The control protocol between master and agent: one JSON document per line on the agent's
stdin (requests) and stdout (everything the agent says).

  request   {"id": 7, "op": "backup", "args": {...}}
  event     {"id": 7, "event": "progress", "data": {...}}     zero or more, while it runs
  result    {"id": 7, "result": {...}}                         exactly one of these two ends it
  error     {"id": 7, "error": {"code": 40, "message": "..."}}

Requests run concurrently; {"op": "cancel", "args": {"id": 7}} asks request 7 to stop.
Strings carry file names that are not UTF-8 as surrogate escapes (\\udcXX in JSON), which
both ends turn back into the exact bytes with os.fsencode.

A line is at most MAX_LINE bytes (the agent's limit can be changed with CAIRN_MAX_REQUEST_MB
in its environment, and its hello says what it is): a longer one is read past, never held,
and answered with an error. A restore plan of a few million files is a line of hundreds of
MB, hence the size of the default."""

import json
import os
import traceback

from app import status
from app.errors import CairnError

PROTOCOL_VERSION = 1
MAX_LINE = 1 << 30
_SKIP = 1 << 20


class LineTooLong(ValueError):
    pass


class Base64Text(str):
    """Text made by base64.b64encode (letters, digits, "+", "/", "="), which JSON writes as it
    is: encode() puts a request's argument of this kind into its line without looking at each
    character for one to escape. A backup's previous state is megabytes of it, and the look
    took 4 ms of a command's start."""

    __slots__ = ()


def encode(msg):
    args = msg.get("args")
    if type(args) is dict and any(type(v) is Base64Text for v in args.values()):
        return _encode_request(msg, args)
    # ensure_ascii keeps surrogate escapes representable; separators keep lines short.
    return (json.dumps(msg, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def _encode_request(msg, args):
    """encode() of a request with Base64Text arguments, written between quotes as they are:
    each is copied once into the line (a copy of megabytes costs as much as the look)."""
    def dump(value):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    head = dump({k: v for k, v in msg.items() if k != "args"})
    parts = [head[:-1], b"," if len(head) > 2 else b"", b'"args":{']
    for i, (k, v) in enumerate(args.items()):
        parts += (b"," if i else b"", dump(k), b":")
        parts += (b'"', v.encode("ascii"), b'"') if type(v) is Base64Text else (dump(v),)
    parts.append(b"}}\n")
    return b"".join(parts)


def encode_event(rid, event, data_json):
    """encode({"id": rid, "event": event, "data": data}) where data is already JSON text, as
    encode writes it (ASCII, compact): a batch of index rows is encoded once, for the
    image's index and for the master alike."""
    return ('{"id":%s,"event":%s,"data":%s}\n' % (json.dumps(rid), json.dumps(event),
                                                  data_json)).encode("ascii")


def decode(line):
    return json.loads(line.decode("utf-8", "surrogateescape"))


def max_request():
    """The agent's limit on a request line, in bytes."""
    v = os.environ.get("CAIRN_MAX_REQUEST_MB", "").strip()
    try:
        mb = float(v) if v else 0
    except ValueError:
        mb = 0
    return int(mb * (1 << 20)) if mb > 0 else MAX_LINE


def read_line(rfile, limit=MAX_LINE):
    """The next line of rfile (b"" at its end). A line of more than `limit` bytes is read to
    its end in pieces and dropped, then LineTooLong says how long it was."""
    line = rfile.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line
    skipped = len(line)
    while True:
        piece = rfile.readline(_SKIP)
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            break
    raise LineTooLong(f"a line of {skipped} bytes, more than the limit of {limit} bytes")


def error_message(op, e):
    """The protocol's error message for an exception that ended operation `op`: its status
    code and text, and for an unforeseen one the trace."""
    if isinstance(e, CairnError):
        return {"code": e.status, "message": str(e)}
    if isinstance(e, TypeError):
        return {"code": status.INVALID_REQUEST, "message": f"{op}: {e}"}
    if isinstance(e, OSError):
        where = f" ({e.filename})" if e.filename else ""
        return {"code": status.INTERNAL, "message": f"{op}: {e.strerror or e}{where}"}
    return {"code": status.INTERNAL, "message": f"{op} failed: {type(e).__name__}: {e}",
            "trace": traceback.format_exc()}
