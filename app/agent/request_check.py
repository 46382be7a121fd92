"""What a request must look like before the agent acts on it (see protocol.py): an object of
an id (a whole number), an op (a name) and args (an object), whose args fit the operation's
handler. Anything else is a BadRequest, answered with error 10: a malformed line costs one
error message, never the agent or the jobs it runs."""

from app.errors import ValidationError

FIELDS = ("id", "op", "args")
MAX_ID = 1 << 63

# The type of each argument by its name, the same in every operation that takes it (a new
# operation keeps to it). None is taken where the handler's default is None. Arguments not
# named here are the handler's to check.
_STR, _INT, _LIST, _DICT = (str,), (int,), (list,), (dict,)
ARG_TYPES = {
    **dict.fromkeys(("path", "partial", "final", "cert", "key", "token", "image_path",
                     "target_dir", "overwrite", "checksum", "direct_io", "host",
                     "snapshot", "file_list", "bind", "image_id", "aside"), _STR),
    **dict.fromkeys(("port", "streams"), _INT),
    **dict.fromkeys(("paths", "selections", "snapshots", "extents", "plan", "image_paths",
                     "images", "lengths", "exclude_names", "volumes"), _LIST),
    **dict.fromkeys(("image_meta", "dest", "excludes", "storage", "sink", "target"), _DICT),
    **dict.fromkeys(("workload",), _STR),
    **dict.fromkeys(("max_pairs", "file_size"), _INT),
    "create": (bool,),
    "back": (bool,),
    "compact_below": (int, float),
}


class BadRequest(ValidationError):
    """id: the request's id where it was a valid one, so that the answer reaches the call."""

    def __init__(self, message, rid=None):
        super().__init__(f"bad request: {message}")
        self.id = rid


def valid_id(rid):
    return type(rid) is int and 0 <= rid < MAX_ID


def parse(msg):
    """(id, op, args) of a decoded request line, or BadRequest."""
    if not isinstance(msg, dict):
        raise BadRequest(f"a request is a JSON object, not {kind(msg)}")
    rid = msg.get("id")
    if not valid_id(rid):
        raise BadRequest(f"the request's id must be a whole number from 0 to 2**63-1, not "
                         f"{kind(rid)}")
    unknown = [k for k in msg if k not in FIELDS]
    if unknown:
        raise BadRequest(f"unknown field {short(unknown[0])} (a request has only "
                         f"{', '.join(FIELDS)})", rid)
    op = msg.get("op")
    if not isinstance(op, str) or not op:
        raise BadRequest(f"the request's op must be the name of an operation, not {kind(op)}",
                         rid)
    args = msg.get("args")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadRequest(f"the args of {short(op)} must be a JSON object, not {kind(args)}", rid)
    return rid, op, args


def check_args(rid, op, fn, args):
    """That `args` fit handler `fn` (fn(req, **args)): no unknown or missing argument, and
    those of ARG_TYPES of their type."""
    params, takes_any = _parameters(fn)
    for name in args:
        if name not in params and not takes_any:
            raise BadRequest(f"{op}: got an unexpected keyword argument {name!r}", rid)
    for name, default in params.items():
        if default is _REQUIRED and name not in args:
            raise BadRequest(f"{op}: missing a required argument: {name!r}", rid)
    for name, value in args.items():
        want = ARG_TYPES.get(name)
        if want is None or name not in params or (value is None and params[name] is None):
            continue
        if not isinstance(value, want) or (type(value) is bool and bool not in want):
            names = " or ".join(_TYPE_NAMES[t] for t in want)
            raise BadRequest(f"{op}: argument {name!r} must be {names}, not {kind(value)}",
                             rid)


_signatures = {}
_TYPE_NAMES = {str: "a string", int: "a whole number", float: "a number", list: "a list",
               dict: "an object", bool: "true or false"}
_REQUIRED = object()
_VARKEYWORDS = 0x08  # inspect.CO_VARKEYWORDS


def _parameters(fn):
    """({name: default, or _REQUIRED}, whether it takes **kwargs) of handler fn(req, ...),
    read from its code object: inspect, which would say the same, was a fifth of the agent's
    imports before it can answer."""
    found = _signatures.get(fn)
    if found is None:
        code = fn.__code__
        npos, nkw = code.co_argcount, code.co_kwonlyargcount
        names = code.co_varnames[:npos + nkw]
        params = dict.fromkeys(names[1:npos], _REQUIRED)  # names[0]: the request
        defaults = fn.__defaults__ or ()
        params.update(zip(names[npos - len(defaults):npos], defaults))
        kwdefaults = fn.__kwdefaults__ or {}
        for name in names[npos:]:
            params[name] = kwdefaults.get(name, _REQUIRED)
        found = _signatures[fn] = (params, bool(code.co_flags & _VARKEYWORDS))
    return found


def kind(value):
    """What a JSON value is, for messages (never the value itself: it may be huge)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return f"the number {short(value)}"
    if isinstance(value, str):
        return f"the string {short(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def short(value, limit=40):
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - (a number of too many digits)
        text = type(value).__name__
    return text if len(text) <= limit else text[:limit] + "..."
