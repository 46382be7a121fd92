"""Sizes as admins write them: `524288`, `512K`, `2M`, `1G` (powers of 1024, with an optional
`B` or `iB`), read the same by the command line and the master; and a size written back the
same way (`512 KiB`, `2 MiB`)."""

from app.errors import ValidationError

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text, what="size"):
    """Bytes from `text` (an int passes as it is); ValidationError naming `what` otherwise."""
    if isinstance(text, int) and not isinstance(text, bool):
        return text
    if not isinstance(text, str):
        raise ValidationError(f"{what} {text!r} is not a size", hint="e.g. 524288, 512K, 2M")
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in UNITS and t[-1:] else ""
    digits = t[:len(t) - len(unit)].strip()
    if not digits.isdigit() or not digits.isascii():
        raise ValidationError(f"{what} {text!r} is not a size", hint="e.g. 524288, 512K, 2M")
    return int(digits) * UNITS[unit]


def size_text(n, short=False):
    """`512 KiB`, `2 MiB`, `1000 bytes`: whole binary units where the size has them; short:
    as parse_size reads them (`512K`, `2M`, `1000`)."""
    for word, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor and n % factor == 0:
            return f"{n // factor}{word[0]}" if short else f"{n // factor} {word}"
    return str(n) if short else f"{n} bytes"
