"""Alerts: their settings, the test message, what is pending and what was sent. Part of the
master API (app/master/__init__.py); the alerts themselves are app/alerts/."""

from app.alerts import alerter, settings as cfg
from app.errors import ValidationError


class AlertsAPI:
    @property
    def alerter(self):
        a = getattr(self, "_alerter", None)
        if a is None:
            a = self._alerter = alerter.Alerter(self)
        return a

    def alert_settings(self):
        """{"settings": {name: {"value", "default", "about"}}, "channels": the channels turned
        on, "problems": settings that stop a channel, "password_stored": whether the OS
        keyring holds the SMTP password (None: no SMTP login is set)}."""
        v = cfg.values(self.db)
        return {"settings": {n: {"value": v[n], "default": d, "about": about}
                             for n, (d, about) in cfg.SPEC.items()},
                "channels": cfg.channels(v), "problems": cfg.problems(v),
                "kinds": dict(cfg.KINDS),
                "password_stored": (cfg.password(v) is not None)
                if v["smtp_host"] and v["smtp_user"] else None}

    def set_alert_settings(self, changes):
        """Sets several alert settings at once ({name: value}; "" or None: the default), all
        checked before any is kept."""
        unknown = [n for n in changes if n not in cfg.SPEC]
        if unknown:
            raise ValidationError(f"there is no alert setting {unknown[0]!r}",
                                  hint="settings: " + ", ".join(cfg.SPEC))
        for name, value in changes.items():
            if value not in (None, ""):
                cfg.check(name, value)
        for name, value in changes.items():
            cfg.put(self.db, name, value)
        return self.alert_settings()

    def set_alert_password(self, password):
        """Keeps the SMTP password in the OS keyring (never the catalog)."""
        if not password:
            raise ValidationError("the password is empty")
        cfg.store_password(cfg.values(self.db), password)
        return self.alert_settings()

    def alerts_test(self, channels=None):
        """Sends a test message on each channel turned on (or those named): {"subject",
        "results": {channel: {"ok", "text"}}}."""
        v = cfg.values(self.db)
        on = cfg.channels(v)
        if not on:
            raise ValidationError(
                "no alert channel is configured",
                hint="`cairn alerts set smtp_host HOST` and `recipients ADDR`, `syslog on`, "
                     "`webhook_url URL` or `command CMD`")
        wrong = [c for c in channels or [] if c not in on]
        if wrong:
            raise ValidationError(f"the {wrong[0]} channel is not configured",
                                  hint="configured: " + ", ".join(on))
        return self.alerter.test(only=channels)

    def alerts_round(self, now=None, ask_hosts=None):
        """One alert round now, waited for (the dispatcher runs them on its own)."""
        return self.alerter.round(now, ask_hosts=ask_hosts)

    def alert_history(self, limit=20):
        return alerter.history(self.db, limit)

    def alert_events(self, limit=200):
        return alerter.open_events(self.db, limit)
