"""Alerts: the master tells the admins about failed and missed backups, verify damage, a pool
above its high-water mark, a host unreachable too long and an overdue catalog backup, by
email through the site's SMTP server, to syslog (journald reads it), to a webhook and to a
command, in one digest per interval rather than a message per job.

  settings.py   what is configured (the `alerts.*` rows of the settings table; the SMTP
                password in the OS keyring)
  events.py     finding what to tell: new events, and conditions that cleared
  digest.py     one message of all that is pending, as text and as JSON
  channels.py   delivering it: email, syslog, webhook, command
  alerter.py    the round the dispatcher runs: find, record, send when due"""
