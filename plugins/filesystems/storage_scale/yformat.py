"""The -Y format of the mm commands: colon-delimited records, a HEADER line naming the fields
of each record type, values percent-escaped. Parsed leniently, since columns are added
between releases."""

from urllib.parse import unquote

PREFIX = 6  # command, record type, HEADER or 0, version, reserved, reserved


def decode(value):
    """A -Y value with its %XX escapes decoded; malformed escapes and '+' stay as they are."""
    return unquote(value, errors="replace") if "%" in value else value


def parse_y(text, command=None):
    """{record type: [row]} of -Y output. Each HEADER line names the fields of its record
    type; a row maps those names to decoded values. Values past the header's end are kept
    under "_extra", fields missing at the end are absent, lines of another command (or not
    in -Y form) and rows of a record type without a header are skipped."""
    headers = {}
    records = {}
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) < 3 or (command and parts[0] != command):
            continue
        if parts[-1] == "":
            parts.pop()  # the trailing colon
        rtype = parts[1]
        if parts[2] == "HEADER":
            headers[rtype] = parts[PREFIX:]
            records.setdefault(rtype, [])
            continue
        names = headers.get(rtype)
        if names is None:
            continue
        row = {}
        values = parts[PREFIX:]
        for i, value in enumerate(values):
            if i < len(names) and names[i]:
                row[names[i]] = decode(value)
            else:
                row.setdefault("_extra", []).append(decode(value))
        records.setdefault(rtype, []).append(row)
    return records


def first_values(text, command=None):
    """The value fields of each data line (for output whose header names are not known)."""
    out = []
    for line in text.splitlines():
        parts = line.split(":")
        if len(parts) <= PREFIX or (command and parts[0] != command) or parts[2] == "HEADER":
            continue
        out.append([decode(v) for v in parts[PREFIX:]])
    return out
