"""The `cairn` command's entry point (the installed script, `python -m app` and the frozen
build): `cairn agent` runs the agent, as a host does, without loading anything of the
master; everything else is the CLI (app/cli/). Both are imported lazily, in main(), so that
each loads only its own side."""

import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["agent"]:
        from app.agent.server import main as agent_main
        return agent_main()
    from app.cli import main as cli_main
    return cli_main(argv)
