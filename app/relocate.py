"""Where restored files go: the mapping from a path in a backup image to the path it is
written to under the restore target.

Without a relocation a path keeps its full name under the target (`/data/x` restored to
`/new` becomes `/new/data/x`). A relocation changes that name in three steps, in this order:

1. strip: a leading path prefix is removed (`/data` turns `/data/x` into `/x`); every path
   must lie under it, or the relocation is refused;
2. rename: a pattern and its replacement. A glob without "/" renames every path component it
   matches (`*.log` -> `*.log.old`); a glob beginning with "/" renames the leading components
   it matches (`/data/*/raw` -> `/archive/*/raw`). Each wildcard of the replacement (`*` or
   `?`) takes, in order, the text the pattern's wildcards matched. A regular expression
   replaces its first match in the whole path (`\\1` and `\\g<name>` refer to its groups);
3. add: a prefix is put in front (`/restored` turns `/x` into `/restored/x`).

A result must be an absolute path made of plain names: no empty, "." or ".." component and no
NUL byte, so that nothing can leave the target directory; and no two paths of one restore may
end up at the same target, nor may a file's target be the parent directory of another's. The
agent checks the first rule again on its side before it writes anything.

A directory whose result is "/" (the prefix stripped is the directory itself) is merged into
the target directory: its own entry is not restored, its contents are.
"""

import re
from dataclasses import dataclass
from typing import Iterable, Optional

from app.errors import ValidationError

MODES = ("glob", "regex")
_GLOB_WILDCARD = re.compile(r"\*|\?|\[!?\]?[^\]]*\]")


class RelocationError(ValidationError):
    """A relocation that cannot be applied: the message names the path and the rule."""


def _clean_prefix(what, prefix):
    """A prefix as given by a user: absolute, no trailing slash; None when empty."""
    if prefix is None:
        return None
    p = prefix.strip()
    if not p:
        return None
    if "\0" in p:
        raise RelocationError(f"the {what} contains a NUL byte")
    if not p.startswith("/"):
        raise RelocationError(f"the {what} {prefix!r} must be an absolute path (begin with /)")
    parts = [c for c in p.split("/") if c]
    if any(c in (".", "..") for c in parts):
        raise RelocationError(f"the {what} {prefix!r} may not contain '.' or '..'")
    return "/" + "/".join(parts) if parts else None


def check_target_path(path, source=None):
    """Refuses a result that could leave the target directory or name nothing."""
    about = f" (from {source})" if source is not None else ""
    if not isinstance(path, str) or not path.startswith("/"):
        raise RelocationError(f"the relocated path {path!r}{about} is not absolute",
                              hint="a pattern rename must keep the leading /")
    if "\0" in path:
        raise RelocationError(f"the relocated path {path!r}{about} contains a NUL byte")
    if path == "/":
        return path
    for c in path[1:].split("/"):
        if c == "..":
            raise RelocationError(f"the relocated path {path!r}{about} contains '..'",
                                  hint="a restore never writes outside its target directory")
        if c in ("", "."):
            raise RelocationError(f"the relocated path {path!r}{about} has an empty or '.' "
                                  "component", hint="check the replacement for stray slashes")
    return path


# ---- pattern renames ------------------------------------------------------------------------

def _glob_regex(pattern):
    """A glob as a regex with one group per wildcard; '*' and '?' never match '/'."""
    out, groups, pos = [], 0, 0
    for m in _GLOB_WILDCARD.finditer(pattern):
        out.append(re.escape(pattern[pos:m.start()]))
        w = m.group()
        if w == "*":
            out.append("([^/]*)")
        elif w == "?":
            out.append("([^/])")
        else:
            body = w[1:-1]
            neg = body.startswith("!")
            body = body[1:] if neg else body
            body = body.replace("\\", "\\\\").replace("^", "\\^")
            out.append(f"([^/{body}])" if neg else f"((?!/)[{body}])")
        groups += 1
        pos = m.end()
    out.append(re.escape(pattern[pos:]))
    return "".join(out), groups


@dataclass(frozen=True)
class _Rename:
    pattern: str
    replacement: str
    mode: str

    def compile(self):
        if self.mode not in MODES:
            raise RelocationError(f"rename mode {self.mode!r} is unknown",
                                  hint="choose glob or regex")
        if not self.pattern:
            raise RelocationError("the rename pattern is empty")
        if self.mode == "regex":
            try:
                rx = re.compile(self.pattern)
            except re.error as e:
                raise RelocationError(f"the rename pattern {self.pattern!r} is not a valid "
                                      f"regular expression: {e}") from None
            try:  # a bad group reference shows now, not in the middle of a restore
                rx.sub(self.replacement, "", count=1)
            except (re.error, IndexError) as e:
                raise RelocationError(f"the replacement {self.replacement!r} does not fit the "
                                      f"pattern: {e}") from None
            return lambda path: rx.sub(self.replacement, path, count=1)
        if "/" in self.pattern and not self.pattern.startswith("/"):
            raise RelocationError(f"the glob {self.pattern!r} must either begin with / "
                                  "(leading components) or contain no / (any one name)")
        body, groups = _glob_regex(self.pattern.rstrip("/") or "/")
        wild = _GLOB_WILDCARD.findall(self.replacement)
        if any(w not in ("*", "?") for w in wild):
            raise RelocationError(f"the replacement {self.replacement!r} may use only * and ? "
                                  "as wildcards")
        if len(wild) > groups:
            raise RelocationError(f"the replacement {self.replacement!r} has {len(wild)} "
                                  f"wildcards, the pattern only {groups}")
        pieces = re.split(r"[*?]", self.replacement)

        def fill(m):
            got = m.groups()
            out = [pieces[0]]
            for i, piece in enumerate(pieces[1:]):
                out.append(got[i])
                out.append(piece)
            return "".join(out)

        if self.pattern.startswith("/"):
            if self.pattern.rstrip("/") == "":
                raise RelocationError("the glob / would rename every path: strip or add a "
                                      "prefix instead")
            rx = re.compile(body + "(?=/|$)")

            def leading(path):
                m = rx.match(path)
                return path if m is None else fill(m) + path[m.end():]
            return leading
        rx = re.compile(body + r"\Z")

        def each_name(path):
            parts = path.split("/")
            for i in range(1, len(parts)):
                m = rx.match(parts[i])
                if m is not None:
                    parts[i] = fill(m)
            return "/".join(parts)
        return each_name


# ---- the relocation --------------------------------------------------------------------------

class Relocation:
    """The mapping of one restore. Build it with Relocation.from_dict (the job parameter)
    or Relocation(strip=..., add=..., rename=(pattern, replacement, mode))."""

    def __init__(self, strip=None, add=None, rename=None):
        self.strip = _clean_prefix("prefix to strip", strip)
        self.add = _clean_prefix("prefix to add", add)
        self.rename = None
        self._rename_fn = None
        if rename:
            pattern, replacement, *rest = rename
            mode = rest[0] if rest else "glob"
            self.rename = _Rename(pattern or "", replacement or "", mode or "glob")
            self._rename_fn = self.rename.compile()

    @classmethod
    def from_dict(cls, d: Optional[dict]):
        if not d:
            return cls()
        if not isinstance(d, dict):
            raise RelocationError("a relocation is a mapping of strip, add and rename")
        unknown = set(d) - {"strip", "add", "rename"}
        if unknown:
            raise RelocationError(f"unknown relocation field(s): {', '.join(sorted(unknown))}")
        r = d.get("rename")
        if r is not None and not isinstance(r, dict):
            raise RelocationError("rename is a mapping of pattern, replacement and mode")
        return cls(strip=d.get("strip"), add=d.get("add"),
                   rename=(r["pattern"], r.get("replacement", ""), r.get("mode", "glob"))
                   if r else None)

    def to_dict(self):
        """The job parameter; None when nothing is relocated."""
        if not self:
            return None
        d = {}
        if self.strip:
            d["strip"] = self.strip
        if self.add:
            d["add"] = self.add
        if self.rename:
            d["rename"] = {"pattern": self.rename.pattern,
                           "replacement": self.rename.replacement, "mode": self.rename.mode}
        return d

    def __bool__(self):
        return bool(self.strip or self.add or self.rename)

    def map(self, path):
        """The target of one image path, relative to the restore target (as "/..."). "/"
        means the target directory itself."""
        p = path
        if self.strip:
            if p == self.strip:
                p = "/"
            elif p.startswith(self.strip + "/"):
                p = p[len(self.strip):]
            else:
                raise RelocationError(f"{path} is not under {self.strip}, the prefix to strip",
                                      hint="strip a prefix that every selected path begins "
                                           "with")
        if self._rename_fn is not None and p != "/":
            p = self._rename_fn(p)
            check_target_path(p, path)
        if self.add:
            p = self.add if p == "/" else self.add + p
        return check_target_path(p, path)


def plan_targets(relocation: Relocation, entries: Iterable):
    """{image path: target} for (path, kind) pairs, refusing a plan in which two paths land
    on one target or a non-directory's target is the parent of another target."""
    targets, owner, kinds = {}, {}, {}
    for path, kind in entries:
        t = relocation.map(path)
        if t == "/" and kind != "d":
            raise RelocationError(f"{path} would become the restore target directory itself",
                                  hint="strip a shorter prefix")
        other = owner.get(t)
        if other is not None and other != path:
            raise RelocationError(f"{other} and {path} would both be restored to {t}",
                                  hint="change the rename so that targets stay distinct")
        owner[t] = path
        kinds[t] = kind
        targets[path] = t
    for t in owner:
        parent = t.rpartition("/")[0]
        while parent:
            k = kinds.get(parent)
            if k is not None and k != "d":
                raise RelocationError(f"{owner[parent]} would be restored to {parent}, which "
                                      f"must be a directory for {owner[t]} (restored to {t})")
            parent = parent.rpartition("/")[0]
    return targets


def join_target(target_dir, mapped):
    """The absolute path on the target host: the restore target plus a mapped path."""
    if mapped == "/":
        return target_dir
    return target_dir.rstrip("/") + mapped
