"""The master API: the one entry point the CLI and the console use. It owns the catalog,
the configuration objects, the agent connections and the job queue.

Master is a facade: what it does is written in focused modules, one per concern, each a
part of the API that Master is made of:

  hosts.py          registering and listing hosts, their SSH host keys, reaching and
                    probing them
  configuration.py  policies (with their clients, selections and schedules), editing and
                    deleting configuration objects, settings
  storage.py        storage servers, disk pools, storage units; verify, cleanup, reclaim
  images.py         images: listing, browsing and searching their indexes, expiring them
  restores.py       checking, previewing and queueing restores
  catalog.py        queueing catalog backups of the master's own state
  health.py         health at a glance (`cairn status`, the dashboard), hosts' last contact
  lifecycles.py     lifecycles (a backup and its duplications) and the copies of images
  stugroups.py      storage unit groups (units a job is placed on when it starts)
  alerts.py         alert settings, test messages, what is pending and what was sent
  reports.py        reports over the job history, the scheduler's upcoming and recorded runs
  jobs.py           reading jobs and their logs, queueing backups, waiting for jobs,
                    restart, cancel, suspend, statistics; a headless dispatcher for
                    queued jobs when none runs
  users.py          Cairn users and roles, who the master acts for, the audit log

The jobs themselves run in app/jobs/ (the dispatcher); the catalog is app/store/. The
console and the CLI use these methods only, never the configuration (`config`) or the job
store (`jobs`) that they delegate to (tests/unit/test_layers.py holds them to it).

Every public method is classified by the role it needs (app/access.py) and checked against
the user the master acts for: `user` (a Cairn user name, or a login name bound to one) and
`origin` (the client's address) are what `cairn master serve --stdio` passes; none given is
the local admin (the embedded console, the local CLI), origin "local"."""

import functools

from app import access
from app.catalog_check import check_not_truncated
from app.config import Config
from app.errors import CairnError
from app.hosts import HostPool
from app.jobs.dispatcher import Dispatcher
from app.jobs.store import JobStore
from app.lifecycles import Lifecycles
from app.master.alerts import AlertsAPI
from app.stugroups import StorageUnitGroups
from app.master.catalog import CatalogAPI
from app.master.configuration import ConfigurationAPI
from app.master.health import HealthAPI
from app.master.hosts import HostsAPI
from app.master.images import ImagesAPI
from app.master.jobs import JobsAPI
from app.master.lifecycles import LifecyclesAPI
from app.master.reports import ReportsAPI
from app.master.restores import (DIRECT_IO_CHOICES, MAX_RESTORE_STREAMS,  # noqa: F401
                                 OVERWRITE_CHOICES, RestoresAPI)
from app.master.storage import StorageAPI
from app.master.stugroups import StorageUnitGroupsAPI
from app.master.users import UsersAPI
from app.paths import Home
from app.store.db import Database


class Master(HostsAPI, ConfigurationAPI, StorageAPI, ImagesAPI, RestoresAPI, JobsAPI,
             CatalogAPI, LifecyclesAPI, StorageUnitGroupsAPI, HealthAPI, AlertsAPI, UsersAPI,
             ReportsAPI):
    def __init__(self, home=None, password_provider=None, user=None, origin=None):
        self.home = Home(home).ensure()
        check_not_truncated(self.home)
        self.db = Database(self.home.catalog)
        self.config = Config(self.db)
        self.lifecycle_config = Lifecycles(self.db)
        self.storage_unit_groups_config = StorageUnitGroups(self.db)
        self.jobs = JobStore(self.db)
        self.hosts = HostPool(self.home, password_provider)
        # the master's own bookkeeping, not a call of the API: unchecked
        self.hosts.on_contact = functools.partial(HealthAPI.record_contact, self)
        self.dispatcher = Dispatcher(self)
        self.access = access.Access(self, user, origin)

    def batch(self, calls, return_exceptions=False):
        """Several calls at once, as RemoteMaster.batch makes them in one round trip: calls
        are (method, args, kwargs), args and kwargs optional; their results in order (a
        failed call raises, or with return_exceptions stands in the list as its error). Each
        call is checked for the master's user as if made alone (app/access.py: unchecked
        itself)."""
        out = []
        for c in calls:
            method, args = c[0], (c[1] if len(c) > 1 else ())
            kwargs = c[2] if len(c) > 2 else {}
            try:
                out.append(getattr(self, method)(*args, **kwargs))
            except CairnError as e:
                if not return_exceptions:
                    raise
                out.append(e)
        return out

    def close(self):
        alerts = getattr(self, "_alerter", None)
        if alerts is not None:
            alerts.wait(30)
        self.hosts.close()
        self.db.close()


access.install(Master)
