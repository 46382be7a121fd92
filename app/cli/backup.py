"""`cairn backup`: start a backup of a policy."""

from app.cli.shared import jobs_result, progress_option


def backup_commands(sub, cmd):
    p = cmd(sub, "backup", "start a backup of a policy", handler=_backup)
    p.add_argument("policy")
    p.add_argument("--client")
    p.add_argument("--schedule")
    p.add_argument("--no-files-cache", action="store_true",
                   help="a full into a deduplication pool reads every file, also those the "
                        "previous image shows unchanged")
    p.add_argument("--wait", action="store_true", help="wait until the jobs end")
    progress_option(p)


def _backup(m, args):
    ids = m.start_backup(args.policy, client=args.client, schedule=args.schedule,
                         files_cache=not args.no_files_cache)
    return jobs_result(m, args, ids)
