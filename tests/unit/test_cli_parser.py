"""The `cairn` parser (app/cli/): every command a parser accepts has its handler, and the
nouns are listed in the order of the CLI contract."""

import argparse

from app.cli import build_parser


def _commands(parser, path=()):
    """(path, parser) of every command, nouns and their actions."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield path + (name,), sub
                yield from _commands(sub, path + (name,))


def _has_actions(parser):
    return any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)


def test_every_action_has_a_handler():
    missing = [" ".join(path) for path, p in _commands(build_parser())
               if not _has_actions(p) and path != ("agent",) and p.get_default("handler") is None]
    assert missing == []


def test_the_nouns_in_their_order():
    nouns = [path[0] for path, _ in _commands(build_parser()) if len(path) == 1]
    assert nouns == ["host", "storage-server", "disk-pool", "storage-unit",
                     "storage-unit-group", "policy", "backup", "jobs", "images", "browse", "restore", "report", "console", "master",
                     "schedule", "status", "status-codes", "catalog", "lifecycle", "alerts",
                     "user", "audit", "agent"]


def test_a_command_opens_the_master_unless_it_must_not():
    ap = build_parser()
    standalone = {" ".join(path) for path, p in _commands(ap)
                  if p.get_default("opens_master") is False}
    # catalog recover: there is no catalog to open until it is done; master serve opens its
    # master itself, as the user its client works as
    assert standalone == {"console", "status-codes", "catalog", "catalog check",
                          "catalog recover", "master serve"}
    args = ap.parse_args(["storage-server", "create", "s", "--type", "dedup", "--host", "h"])
    assert args.handler.__name__ == "_server_create" and args.opens_master is True


def test_a_noun_that_lists_by_default_lists_without_its_options(tmp_path, capsys):
    """`cairn images` alone is `cairn images list`: none of list's options are given."""
    from app.cli import main
    assert main(["--home", str(tmp_path / "home"), "images", "--json"]) == 0
    assert '"images": []' in capsys.readouterr().out


def _shape(parser):
    """Every command under a parser with the option strings and destinations it takes."""
    return {path: sorted((tuple(a.option_strings), a.dest) for a in p._actions)
            for path, p in _commands(parser)}


def test_a_parser_built_for_one_noun_parses_that_noun_as_the_whole_one_does():
    from app.cli import _noun
    whole = _shape(build_parser())
    nouns = {path[0] for path in whole}
    for noun in nouns:
        # main() falls back to the whole parser where a noun has none of its own (agent)
        built = build_parser(noun) or build_parser()
        mine = {path: shape for path, shape in _shape(built).items()
                if path[0] == noun}
        assert mine == {path: shape for path, shape in whole.items() if path[0] == noun}
    assert build_parser("no-such-noun") is None
    assert _noun(["--home", "backup", "--json", "policy", "show", "p"]) == "policy"
    assert _noun(["--json", "--help", "backup"]) is None and _noun(["--json"]) is None
    args = build_parser("backup").parse_args(["--json", "backup", "p", "--wait"])
    assert args.handler.__name__ == "_backup" and args.policy == "p" and args.wait


def test_the_options_naming_a_remote_master_come_before_the_noun():
    from app.cli import _noun
    assert _noun(["--master", "admin@backup1", "--identity", "k", "--master-command",
                  "cairn master serve --stdio", "--trust-master-key", "jobs", "list"]) == "jobs"
    args = build_parser("jobs").parse_args(["--master", "a@h:2222", "jobs", "list"])
    assert args.master == "a@h:2222" and args.handler.__name__ == "_list"


def test_commands_of_the_masters_own_machine_are_refused_with_master(tmp_path, capsys):
    from app.cli import main
    for argv in (["master", "run"], ["catalog", "check"], ["master", "serve", "--stdio"]):
        assert main(["--master", "a@h", *argv]) == 10
        err = capsys.readouterr().err
        assert "cannot run against a master over SSH" in err, argv
    assert main(["--home", str(tmp_path), "--identity", "k", "jobs", "list"]) == 10
    assert "--identity goes with --master" in capsys.readouterr().err
