"""What a verify found open to other users in a pool (its folders and files are Cairn's own,
private: folders 0700, files 0600), for the job log and result of both verifiers."""

# How many paths found open to other users the job log names, and its result keeps.
LOG_MODES = 20
RESULT_MODES = 1000


def _mode_line(m):
    if m.get("error"):
        return (f"{m['path']} is open to other users (mode {m['mode']}) and could not be made "
                f"private: {m['error']}; run `chmod go-rwx` on it as its owner or as root")
    return f"{m['path']} was open to other users (mode {m['mode']}); it is private again"


def _paths(n):
    return (f"{n} file or folder of the pool was" if n == 1
            else f"{n} files or folders of the pool were")


def exposed_text(modes):
    """The job's message when a verify found nothing worse than modes open to others."""
    return (f"{_paths(len(modes))} open to other users; "
            f"{'it is' if len(modes) == 1 else 'they are'} private again: see the log")


def report_modes(ctx, modes):
    """Logs what a verify found open to other users (made private, or why it could not be);
    returns the findings for the job's result (at most RESULT_MODES)."""
    if not modes:
        return []
    ctx.log(f"{_paths(len(modes))} open to other users: anyone on the storage "
            "host (or on any node mounting its file system) could read backed-up data or see "
            "which clients are backed up. Cairn keeps them private (folders 0700, files "
            "0600); find out who changed them.", "error")
    for m in modes[:LOG_MODES]:
        ctx.log(_mode_line(m), "error")
    if len(modes) > LOG_MODES:
        ctx.log(f"... and {len(modes) - LOG_MODES} more (the job's result lists up to "
                f"{RESULT_MODES})", "error")
    return modes[:RESULT_MODES]
