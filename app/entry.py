"""The `cairn` command's entry point (the installed script, `python -m app` and the frozen
build): `cairn agent` runs the agent, as a host does, without loading anything of the
master; everything else is the CLI (app/cli/). Both are imported lazily, in main(), so that
each loads only its own side."""

import sys


# global options that take a value (app/cli/__init__.py)
_VALUED = ("--home", "--master", "--identity", "--master-command")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["agent"]:
        from app.agent.server import main as agent_main
        return agent_main()
    if _runs_jobs_here(argv):
        from app.transport.local import prestart
        prestart()
    from app.cli import main as cli_main
    return _leave(cli_main(argv))


def _leave(code):
    """Ends the command once it has returned: what it registered to run at exit runs and
    its output is flushed, then the process leaves without tearing the interpreter down
    (freeing every module and object of the master took 20-30 ms that each command waited
    for). Not while a thread the command started is still running (Python waits for those),
    nor after the console, whose toolkit saves its settings as it is torn down."""
    import atexit
    import os
    import threading
    if "PySide6" in sys.modules or any(
            t is not threading.main_thread() and not t.daemon and t.is_alive()
            for t in threading.enumerate()):
        return code
    atexit._run_exitfuncs()
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass  # a reader that left (`| head`), or a stream closed: nothing more to say
    os._exit(code if isinstance(code, int) else 0)


def _runs_jobs_here(argv):
    """A backup or restore that waits for its jobs, on this machine's master: they need the
    local host's agent (the client's, or the storage server's), which then starts while the
    command loads."""
    words = iter(argv)
    for word in words:
        if word == "--master" or word.startswith("--master="):
            return False
        if word in _VALUED:
            next(words, None)
        elif not word.startswith("-"):
            return word in ("backup", "restore") and "--wait" in argv
    return False
