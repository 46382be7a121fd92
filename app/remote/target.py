"""[USER@]HOST[:PORT]: how the command line and the console name a master, as ssh does (an
IPv6 address in brackets when a port follows: [::1]:2222)."""

from app.errors import ValidationError

DEFAULT_PORT = 22
#: what is run over SSH to serve the master, unless --master-command says otherwise
DEFAULT_COMMAND = "cairn master serve --stdio"


def parse(text):
    """(user or None, host, port) of a master's name; ValidationError for one that is none."""
    raw = (text or "").strip()
    user, _, rest = raw.rpartition("@") if "@" in raw else (None, "", raw)
    port = DEFAULT_PORT
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail.startswith(":"):
            port = tail[1:]
        elif tail:
            host = ""
    elif rest.count(":") == 1:
        host, _, port = rest.partition(":")
    else:
        host = rest    # a name, or an IPv6 address without a port
    try:
        port = int(port)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise ValidationError(f"master {text!r}: the port {port!r} is no port number",
                              hint="name the master as [USER@]HOST[:PORT], e.g. "
                                   "admin@backup1:22") from None
    if not host or (user is not None and not user) or any(c.isspace() for c in raw):
        raise ValidationError(f"master {text!r} is not [USER@]HOST[:PORT]",
                              hint="e.g. admin@backup1 or admin@192.0.2.7:2222")
    return user, host, port


def display(user, host, port):
    """The name of a master to show: user@host, with :port when it is not 22."""
    shown = f"[{host}]" if ":" in host and port != DEFAULT_PORT else host
    return (f"{user}@" if user else "") + shown + (f":{port}" if port != DEFAULT_PORT else "")
