"""Reports over the job history and what the scheduler will run and did: what `cairn report`,
`cairn schedule runs` and the console's reports page show. Part of the master API
(app/master/__init__.py); the reports themselves are app/reports.py, the scheduler
app/scheduler.py."""

from app.jobs import stats


class ReportsAPI:
    def job_report(self, kind, since=None, until=None, client=None, policy=None,
                   local_days=False, peak_window_s=stats.PEAK_WINDOW_S, first_s=stats.FIRST_S):
        """The report of jobs of type `kind` ("backup", "restore"): rows, groups, summary,
        daily totals (app.reports.job_report)."""
        # The reports and the scheduler load for the calls that need them, not with every
        # master (a `cairn` command's start).
        from app import reports
        return reports.job_report(self, kind, since=since, until=until, client=client,
                                  policy=policy, local_days=local_days,
                                  peak_window_s=peak_window_s, first_s=first_s)

    def report_choices(self, kind="backup"):
        """The clients and policies that have jobs of type `kind`, for a report's filters."""
        from app import reports  # as in job_report
        return reports.report_choices(self, kind)

    def schedule_runs(self, policy=None, horizon_s=7 * 86400, limit=200):
        """{"upcoming": the scheduled runs due within horizon_s seconds, "runs": the recorded
        ones (queued, missed, skipped), newest first}."""
        from app.scheduler import Scheduler  # as the reports in job_report
        sched = Scheduler(self)
        return {"upcoming": sched.next_runs(policy, horizon_s=horizon_s),
                "runs": sched.runs(policy, limit=limit)}
