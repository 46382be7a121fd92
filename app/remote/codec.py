"""Values and errors on the wire between RemoteMaster and `cairn master serve`: the one place
where what the master API returns is made JSON and turned back into equivalent values.

What the API returns: dicts (some keyed by numbers: uid -> user name), lists, tuples (the
index's Entry tuples, (t, rate) points), sqlite rows, dataclasses, bytes, sets and
iterators. JSON has dicts keyed by strings and lists only; the rest travels tagged as
{"$c": KIND, ...}, and a dict that has a "$c" key of its own travels as pairs, so no value
is mistaken for a tag. Strings keep file names that are not UTF-8 as surrogate escapes
(app/formats/protocol.py).

An error travels as its class name, message, hint, status and the attributes a caller reads
(a host key's fingerprint); the client raises the same class with the same message."""

import array
import base64
import builtins
import collections
import contextlib
import dataclasses
import gc
import importlib
import sqlite3
from operator import itemgetter

from app.errors import CairnError

TAG = "$c"
PROTOCOL = 1
# A call's `cancel` argument on the wire: the server makes it an Event that a
# {"cancel": id} message sets.
EVENT = {TAG: "event"}
# What the master holds rather than does (its configuration, job store, catalog, hosts,
# dispatcher, state directory): refused by name, on either side.
OWN_PARTS = ("config", "jobs", "db", "hosts", "dispatcher", "home", "lifecycle_config",
             "storage_unit_groups_config", "alerter")

# Named tuples the client rebuilds as the same class, by name (module loaded on first use).
_NAMED_TUPLES = {"Entry": "app.catalog_index.reader"}
# Of those, the ones whose fields are always str or int: a list of them goes as it is,
# without a look at each value (a directory of 100,000 entries is 1.5 million values).
_PLAIN_TUPLES = {"Entry"}
_built_tuples = {}
# Modules of the master side whose errors may cross the wire, loaded when one does. Errors
# of app.errors are always known.
_ERROR_MODULES = ("app.store.db", "app.transport.agent_client", "app.relocate",
                  "app.catalog_backup.escrow", "app.catalog_backup.archive",
                  "app.alerts.channels")


def modules_loaded_by_name():
    """The modules this codec imports by name while decoding (named tuples, errors): a
    frozen build names them as hidden imports (packaging/cairn.spec)."""
    return sorted(set(_NAMED_TUPLES.values()) | set(_ERROR_MODULES))


# Errors other than Cairn's that are raised again as themselves (a wrong argument, say).
_BUILTIN_ERRORS = ("TypeError", "ValueError", "KeyError", "LookupError", "IndexError",
                   "AttributeError", "NotImplementedError", "RuntimeError", "TimeoutError",
                   "OSError", "FileNotFoundError", "PermissionError")
# What an error carries besides its message, hint and status (app/errors.py,
# app/transport/ssh.py): kept when they are plain values.
_ERROR_ATTRS = ("fingerprint", "key_type", "old_fingerprints", "known_hosts", "lines",
                "address", "port", "kind", "user", "role", "action")


# ---- values -----------------------------------------------------------------------------------

def encode(value):
    """A JSON-safe form of value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        if TAG in value or not all(isinstance(k, str) for k in value):
            return {TAG: "dict", "v": [[encode(k), encode(v)] for k, v in value.items()]}
        return {k: encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return _encode_list(value)
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):
            return {TAG: "nt", "t": type(value).__name__, "f": list(value._fields),
                    "v": [encode(x) for x in value]}
        return {TAG: "tuple", "v": [encode(x) for x in value]}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {TAG: "bytes", "v": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, sqlite3.Row):
        return encode(dict(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    if isinstance(value, (set, frozenset)):
        return {TAG: "set", "v": [encode(x) for x in value]}
    if hasattr(value, "__next__") or hasattr(value, "__iter__"):
        return _encode_list(list(value))
    return str(value)


def _encode_list(items):
    # A listing of 100,000 index entries: one tag for all of them, not one each.
    first = items[0] if items else None
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        kind = type(first)
        if all(type(x) is kind for x in items):
            if kind.__name__ in _PLAIN_TUPLES and \
                    _NAMED_TUPLES[kind.__name__] == kind.__module__:
                return {TAG: "cols", "t": kind.__name__, "f": list(first._fields),
                        "n": len(items), "c": [_column(list(map(itemgetter(i), items)))
                                               for i in range(len(first))]}
            return {TAG: "nts", "t": kind.__name__, "f": list(first._fields),
                    "v": [[encode(x) for x in row] for row in items]}
    return [encode(x) for x in items]


# Array type codes from the narrowest: a column of numbers goes as the bytes of the first
# that holds all of them.
_INT_CODES = tuple((code, -(1 << (8 * array.array(code).itemsize - 1)),
                    (1 << (8 * array.array(code).itemsize - 1)) - 1) for code in "bhiq")


def _column(values):
    """One field of a list of plain named tuples, column-wise: strings joined by NUL (which
    no name or path holds), numbers as the bytes of an array; anything else as a list.
    JSON's numbers and quoted strings cost a hundred times more to write and read."""
    try:
        text = "\0".join(values)
        if text.count("\0") == len(values) - 1:
            return {"s": text}
    except TypeError:
        pass
    try:
        lo, hi = min(values), max(values)
        code = next(c for c, least, most in _INT_CODES if least <= lo and hi <= most)
        packed = array.array(code, values)
    except (TypeError, StopIteration, OverflowError, ValueError):
        return [encode(x) for x in values]
    return {"a": code, "b": base64.b64encode(packed.tobytes()).decode("ascii")}


def _uncolumn(col):
    if isinstance(col, list):
        return [decode(x) for x in col]
    if "s" in col:
        return col["s"].split("\0")
    a = array.array(col["a"])
    a.frombytes(base64.b64decode(col["b"]))
    return a


def decode(value):
    """The value encode() was given, or one equivalent to it."""
    if isinstance(value, list):
        return [decode(x) for x in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TAG)
    if kind is None:
        return {k: decode(v) for k, v in value.items()}
    v = value.get("v")
    if kind == "dict":
        return {_hashable(decode(k)): decode(x) for k, x in v}
    if kind == "tuple":
        return tuple(decode(x) for x in v)
    if kind == "bytes":
        return base64.b64decode(v)
    if kind == "set":
        return {_hashable(decode(x)) for x in v}
    if kind in ("nt", "nts", "cols"):
        cls = _named_tuple(value["t"], value["f"])
        if kind == "nt":
            return cls(*(decode(x) for x in v))
        if kind == "cols":
            cols = [_uncolumn(c) for c in value["c"]]
            if any(len(c) != value["n"] for c in cols):
                raise ValueError("a column of a listing does not hold every row")
            return list(map(cls._make, zip(*cols)))
        return [cls(*(decode(x) for x in row)) for row in v]
    raise ValueError(f"unknown value kind {kind!r} on the wire")


def _hashable(x):
    return tuple(x) if isinstance(x, list) else x


def _named_tuple(name, fields):
    key = (name, tuple(fields))
    cls = _built_tuples.get(key)
    if cls is None:
        module = _NAMED_TUPLES.get(name)
        if module is not None:
            cls = getattr(importlib.import_module(module), name, None)
            if cls is not None and tuple(getattr(cls, "_fields", ())) != key[1]:
                cls = None   # another version's fields: a plain named tuple instead
        if cls is None:
            cls = collections.namedtuple(name, fields)
        _built_tuples[key] = cls
    return cls


@contextlib.contextmanager
def no_gc(size):
    """Around reading a document of `size` bytes: a large one (a directory listing of 100,000
    entries) is millions of new objects, which would set off the cycle collector again and
    again for nothing (it holds no cycles); this takes a third of the time."""
    if size < LARGE or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


LARGE = 1 << 20


# ---- errors -----------------------------------------------------------------------------------

def encode_error(e):
    """{"type", "message", ...}: what the client needs to raise the same error."""
    if isinstance(e, CairnError):
        doc = {"type": type(e).__name__, "module": type(e).__module__, "message": e.message,
               "hint": e.hint, "status": e.status,
               "bases": [c.__name__ for c in type(e).__mro__[1:]
                         if isinstance(c, type) and issubclass(c, CairnError)]}
        attrs = {a: getattr(e, a) for a in _ERROR_ATTRS
                 if isinstance(getattr(e, a, None), (str, int, list))}
        if attrs:
            doc["attrs"] = attrs
        return doc
    name = type(e).__name__
    doc = {"type": name if name in _BUILTIN_ERRORS else "InternalError",
           "message": str(e) if name in _BUILTIN_ERRORS else f"{name}: {e}"}
    if isinstance(e, OSError):
        doc["errno"], doc["strerror"], doc["filename"] = e.errno, e.strerror, e.filename
    return doc


def decode_error(doc):
    """The exception an error document stands for, ready to raise."""
    name, message = doc.get("type"), doc.get("message") or "the master reported an error"
    if name in _BUILTIN_ERRORS:
        cls = getattr(builtins, name)
        if issubclass(cls, OSError) and doc.get("errno") is not None:
            return cls(doc["errno"], doc.get("strerror") or message, doc.get("filename"))
        return cls(message)
    cls = _error_class(name, doc.get("module"))
    for base in doc.get("bases") or ():
        if cls is not None:
            break
        cls = _error_class(base, None)
    if cls is None:
        cls = CairnError
        if name == "InternalError":
            message = f"internal error on the master: {message}"
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.message, e.hint = message, doc.get("hint")
    if doc.get("status") is not None:
        e.status = doc["status"]
    for k, v in (doc.get("attrs") or {}).items():
        if k in _ERROR_ATTRS:
            setattr(e, k, v)
    return e


def _error_class(name, module):
    if not name:
        return None
    found = _cairn_errors().get(name)
    if found is None and module in _ERROR_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            return None
        found = _cairn_errors().get(name)
    return found


def _cairn_errors():
    out, todo = {"CairnError": CairnError}, [CairnError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith(("app.", "plugins.")):
                out.setdefault(sub.__name__, sub)
            todo.append(sub)
    return out
