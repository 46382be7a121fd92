"""Text from clients, shown to a person: every character that does not print is written as an
escape, the way `ls -b` writes file names.

A file name, a log line or a host's answer to a probe may hold anything a client chose: a
newline that fakes a second listing line, a carriage return that overwrites the line, ESC
sequences that clear the screen or set the terminal's title, bidirectional overrides that
reorder what is read. Human output (the CLI's tables and lines, the console's lists and log
views) passes such text through escape() once, at the point where it is printed; JSON output
keeps the exact text (names that are not UTF-8 as surrogate escapes, as os.fsdecode makes
them).

The escapes: \\a \\b \\t \\n \\v \\f \\r for those controls, \\\\ for a backslash (so that an
escape and a name that merely looks like one can be told apart), and three octal digits per
byte for every other character that does not print: other C0 and C1 controls (ESC is \\033),
DEL, format characters such as U+202E (its UTF-8 bytes, \\342\\200\\256), line and paragraph
separators, and bytes of names that are not UTF-8 (\\351, the byte itself). Printable
characters, spaces and letters of any script included, stay as they are."""

_NAMED = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f",
          "\r": "\\r", "\\": "\\\\"}


def _octal(ch):
    try:
        raw = ch.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # a lone surrogate that is no escaped byte (e.g. from "\ud800" in JSON)
        raw = ch.encode("utf-8", "surrogatepass")
    return "".join(f"\\{b:03o}" for b in raw)


def escape(text):
    """`text` with every character that does not print written as an escape (see above).
    Anything that is not a str is turned into one first."""
    if not isinstance(text, str):
        text = str(text)
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_NAMED.get(ch) or (ch if ch.isprintable() else _octal(ch)) for ch in text)


def escape_all(doc):
    """A copy of a JSON-like document (dicts, lists, tuples, strings, numbers) whose strings,
    keys included, are escaped: what the CLI's human printers are given."""
    if isinstance(doc, str):
        return escape(doc)
    if isinstance(doc, dict):
        return {escape(k) if isinstance(k, str) else k: escape_all(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [escape_all(v) for v in doc]
    if isinstance(doc, tuple):
        return tuple(escape_all(v) for v in doc)
    return doc
