"""The catalog's schema as numbered migrations, applied in order by app/store/db.py; the
catalog's `PRAGMA user_version` is how many of them it has. A migration is never changed once
released: a change of the schema is a new one at the end. Each is one script of statements
separated by semicolons (no triggers: db.py splits them)."""

MIGRATIONS = [
    # 1: the first schema
    """
    CREATE TABLE hosts (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL CHECK (kind IN ('local', 'ssh')),
        address TEXT,
        port INTEGER,
        user TEXT,
        key_file TEXT,
        data_address TEXT,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE storage_servers (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        path TEXT,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE disk_pools (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        server_id INTEGER NOT NULL REFERENCES storage_servers(id),
        high_water INTEGER NOT NULL DEFAULT 98,
        low_water INTEGER NOT NULL DEFAULT 80,
        max_io_streams INTEGER,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE pool_volumes (
        id INTEGER PRIMARY KEY,
        pool_id INTEGER NOT NULL REFERENCES disk_pools(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        position INTEGER NOT NULL,
        UNIQUE (pool_id, path)
    );
    CREATE TABLE storage_units (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        pool_id INTEGER NOT NULL REFERENCES disk_pools(id),
        max_concurrent_jobs INTEGER NOT NULL DEFAULT 1,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE policies (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        storage_unit_id INTEGER NOT NULL REFERENCES storage_units(id),
        priority INTEGER NOT NULL DEFAULT 0,
        compression INTEGER NOT NULL DEFAULT 0,
        encryption INTEGER NOT NULL DEFAULT 0,
        multiple_streams INTEGER NOT NULL DEFAULT 0,
        active INTEGER NOT NULL DEFAULT 1,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE policy_clients (
        policy_id INTEGER NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
        host_id INTEGER NOT NULL REFERENCES hosts(id),
        PRIMARY KEY (policy_id, host_id)
    );
    CREATE TABLE policy_selections (
        id INTEGER PRIMARY KEY,
        policy_id INTEGER NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
        path TEXT NOT NULL,
        UNIQUE (policy_id, path)
    );
    CREATE TABLE schedules (
        id INTEGER PRIMARY KEY,
        policy_id INTEGER NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('full', 'differential', 'cumulative')),
        retention_s INTEGER NOT NULL,
        frequency_s INTEGER,
        windows TEXT NOT NULL DEFAULT '[]',
        UNIQUE (policy_id, name)
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        type TEXT NOT NULL,
        state TEXT NOT NULL,
        status INTEGER,
        client TEXT,
        policy TEXT,
        schedule TEXT,
        storage_unit TEXT,
        priority INTEGER NOT NULL DEFAULT 0,
        created TEXT NOT NULL,
        started TEXT,
        ended TEXT,
        bytes INTEGER NOT NULL DEFAULT 0,
        files INTEGER NOT NULL DEFAULT 0,
        total_bytes INTEGER,
        total_files INTEGER,
        rate_bytes_per_s REAL,
        wait_reason TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        params TEXT NOT NULL DEFAULT '{}',
        image_id TEXT,
        runner TEXT,
        heartbeat REAL
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE TABLE job_log (
        id INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        ts TEXT NOT NULL,
        level TEXT NOT NULL,
        message TEXT NOT NULL
    );
    CREATE INDEX job_log_job ON job_log(job_id, id);
    CREATE TABLE job_samples (
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        t REAL NOT NULL,
        bytes INTEGER NOT NULL,
        files INTEGER NOT NULL
    );
    CREATE INDEX job_samples_job ON job_samples(job_id, t);
    CREATE TABLE images (
        id TEXT PRIMARY KEY,
        client TEXT NOT NULL,
        policy TEXT NOT NULL,
        schedule TEXT NOT NULL,
        schedule_type TEXT NOT NULL,
        created TEXT NOT NULL,
        expires TEXT,
        bytes INTEGER NOT NULL,
        files INTEGER NOT NULL,
        storage_unit TEXT NOT NULL,
        pool TEXT NOT NULL,
        storage_host TEXT NOT NULL,
        path TEXT NOT NULL,
        image_bytes INTEGER NOT NULL,
        job_id INTEGER,
        selections TEXT NOT NULL DEFAULT '[]',
        warnings INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX images_client ON images(client, created);
    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        expires REAL NOT NULL
    );
    """,
    # 2: how file checksums are made: chosen per policy, recorded per image. Images made
    # before this had SHA-256 pieces.
    """
    ALTER TABLE policies ADD COLUMN checksum TEXT NOT NULL DEFAULT 'crc32';
    ALTER TABLE images ADD COLUMN checksum TEXT NOT NULL DEFAULT 'sha256'
    """,
    # 3: the activity monitor reads only what changed: every write to a job takes the next
    # value of one catalog-wide change counter, a removed job leaves its id with the value of
    # its removal; throughput samples found by time for the plot of all jobs.
    """
    ALTER TABLE jobs ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_changed ON jobs(changed);
    CREATE TABLE job_removals (
        job_id INTEGER PRIMARY KEY,
        changed INTEGER NOT NULL
    );
    CREATE INDEX job_removals_changed ON job_removals(changed);
    CREATE INDEX job_samples_t ON job_samples(t)
    """,
    # 4: schedules that run themselves. Calendar schedules; the scheduler's record of each
    # window it acted on (one row per policy, schedule, client and due time, so two masters can
    # never queue the same run); job families (parent/child streams, retries) and start
    # limits; images that reference other images' data (incrementals, stream sets); per-client
    # job limits and master settings.
    """
    ALTER TABLE schedules ADD COLUMN calendar TEXT;
    CREATE TABLE schedule_runs (
        id INTEGER PRIMARY KEY,
        policy TEXT NOT NULL,
        schedule TEXT NOT NULL,
        client TEXT NOT NULL,
        due TEXT NOT NULL,
        window_end TEXT,
        outcome TEXT NOT NULL,
        job_id INTEGER,
        noted TEXT NOT NULL,
        UNIQUE (policy, schedule, client, due)
    );
    CREATE INDEX schedule_runs_last ON schedule_runs(policy, schedule, client, due);
    ALTER TABLE jobs ADD COLUMN parent_id INTEGER;
    ALTER TABLE jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE jobs ADD COLUMN retry_of INTEGER;
    ALTER TABLE jobs ADD COLUMN not_before REAL;
    ALTER TABLE jobs ADD COLUMN not_after REAL;
    ALTER TABLE jobs ADD COLUMN suspended INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_parent ON jobs(parent_id);
    ALTER TABLE images ADD COLUMN base_image TEXT;
    ALTER TABLE images ADD COLUMN sources TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE images ADD COLUMN part_of TEXT;
    ALTER TABLE images ADD COLUMN stream TEXT;
    CREATE TABLE image_deps (
        image_id TEXT NOT NULL,
        depends_on TEXT NOT NULL,
        PRIMARY KEY (image_id, depends_on)
    );
    CREATE INDEX image_deps_on ON image_deps(depends_on);
    ALTER TABLE hosts ADD COLUMN max_jobs INTEGER;
    CREATE TABLE settings (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
    """,
    # 5: file system snapshots and file lists. A host's agent environment (e.g. how to reach
    # the Storage Scale commands); whether a policy backs up from a snapshot and how its
    # backups find their files; per image the snapshot it was read from and how its file
    # list was made (an incremental on Storage Scale compares change times with it).
    """
    ALTER TABLE hosts ADD COLUMN agent_env TEXT;
    ALTER TABLE policies ADD COLUMN snapshot TEXT NOT NULL DEFAULT 'none';
    ALTER TABLE policies ADD COLUMN file_list TEXT NOT NULL DEFAULT 'auto';
    ALTER TABLE images ADD COLUMN snapshot TEXT;
    ALTER TABLE images ADD COLUMN scan TEXT
    """,
    # 6: deduplicating pools. A storage server's options (chunk sizes, encryption at rest);
    # where chunking happens (per policy, and per client to override it); per job the share of
    # its data the pool already held and what a verify or reclaim found; per image what it
    # added to the pool.
    """
    ALTER TABLE storage_servers ADD COLUMN options TEXT;
    ALTER TABLE policies ADD COLUMN dedup TEXT NOT NULL DEFAULT 'server';
    ALTER TABLE hosts ADD COLUMN dedup TEXT NOT NULL DEFAULT 'policy';
    ALTER TABLE jobs ADD COLUMN dedup_ratio REAL;
    ALTER TABLE jobs ADD COLUMN result TEXT;
    ALTER TABLE images ADD COLUMN dedup TEXT
    """,
    # 7: how sparse a deduplicating pool's container must be (live bytes, percent of its
    # size) before space reclaim compacts it; full schedules whose backups read every file
    # (no files cache), as a periodic check that the cache missed nothing.
    """
    ALTER TABLE disk_pools ADD COLUMN compact_below INTEGER NOT NULL DEFAULT 50;
    ALTER TABLE schedules ADD COLUMN read_all INTEGER NOT NULL DEFAULT 0
    """,
    # 8: policies that leave out what is marked nodump (chattr +d), as dump does.
    """
    ALTER TABLE policies ADD COLUMN skip_nodump INTEGER NOT NULL DEFAULT 0
    """,
    # 9: images in use and images on their way in or out. A backup holds the images it reads
    # from (its incremental base and that base's sources, or its files cache) from the moment
    # it chooses them until it ends, so no expiry removes them under it; an expire job marks
    # the images it removes (images.expiring: its job id), so no backup chooses them any more.
    # A commit in progress: written before an image's file is renamed into place and removed
    # with the catalog row's insert, so a process killed in between is resolved on the next
    # start (app/jobs/commit.py).
    """
    CREATE TABLE image_holds (
        job_id INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        image_id TEXT NOT NULL,
        why TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (job_id, image_id)
    );
    CREATE INDEX image_holds_image ON image_holds(image_id);
    ALTER TABLE images ADD COLUMN expiring INTEGER;
    CREATE TABLE image_commits (
        image_id TEXT PRIMARY KEY,
        job_id INTEGER NOT NULL,
        storage_host TEXT NOT NULL,
        pool TEXT NOT NULL,
        partial TEXT NOT NULL,
        final TEXT NOT NULL,
        record TEXT NOT NULL,
        started TEXT NOT NULL
    )
    """,
    # 10: verify on a schedule: a pool's verify interval in seconds (NULL: only by hand)
    """
    ALTER TABLE disk_pools ADD COLUMN verify_every INTEGER
    """,
    # 11: catalog schedules (their runs are catalog backups of the master): the schedule
    # type's check names them, which sqlite changes only by making the table anew.
    """
    CREATE TABLE schedules_new (
        id INTEGER PRIMARY KEY,
        policy_id INTEGER NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        type TEXT NOT NULL CHECK (type IN ('full', 'differential', 'cumulative', 'catalog')),
        retention_s INTEGER NOT NULL,
        frequency_s INTEGER,
        windows TEXT NOT NULL DEFAULT '[]',
        calendar TEXT,
        read_all INTEGER NOT NULL DEFAULT 0,
        UNIQUE (policy_id, name)
    );
    INSERT INTO schedules_new(id, policy_id, name, type, retention_s, frequency_s, windows,
                              calendar, read_all)
        SELECT id, policy_id, name, type, retention_s, frequency_s, windows, calendar, read_all
        FROM schedules;
    DROP TABLE schedules;
    ALTER TABLE schedules_new RENAME TO schedules
    """,
    # 12: a pool's verify pace: at most this many MB/s read back (NULL: as fast as it goes)
    """
    ALTER TABLE disk_pools ADD COLUMN verify_max_mb_s INTEGER
    """,
    # 13: images recorded again from a pool by an import job rather than by their backup:
    # what the import found (its job, the image's format version and original job, what an
    # older image format lacked, names the catalog did not know), as JSON; NULL otherwise.
    """
    ALTER TABLE images ADD COLUMN imported TEXT
    """,
    # 14: lifecycles and second copies. A lifecycle is ordered steps: the backup to one
    # storage unit, then duplications to others, each copy with its own retention (-1:
    # infinite). A policy under a lifecycle keeps storage_unit_id as the unit its backups
    # write to: its lifecycle's backup step. The images row stays the image's primary copy
    # (copy_number: which copy it describes, 1 until that copy expired and the next took its
    # place); image_copies holds the further ones. A duplication in progress is recorded
    # before it writes (phase "writing") and before its rename ("committing"), so that a
    # process killed at any point is resolved on the next start (app/jobs/duplicate_commit.py).
    """
    CREATE TABLE lifecycles (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE lifecycle_steps (
        lifecycle_id INTEGER NOT NULL REFERENCES lifecycles(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        kind TEXT NOT NULL CHECK (kind IN ('backup', 'duplicate')),
        storage_unit_id INTEGER NOT NULL REFERENCES storage_units(id),
        retention_s INTEGER NOT NULL,
        PRIMARY KEY (lifecycle_id, position)
    );
    ALTER TABLE policies ADD COLUMN lifecycle_id INTEGER REFERENCES lifecycles(id);
    ALTER TABLE images ADD COLUMN copy_number INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE images ADD COLUMN lifecycle TEXT;
    CREATE TABLE image_copies (
        image_id TEXT NOT NULL,
        copy_number INTEGER NOT NULL,
        storage_unit TEXT NOT NULL,
        pool TEXT NOT NULL,
        storage_host TEXT NOT NULL,
        path TEXT NOT NULL,
        image_bytes INTEGER NOT NULL,
        created TEXT NOT NULL,
        expires TEXT,
        job_id INTEGER,
        state TEXT NOT NULL DEFAULT 'ok',
        dedup TEXT,
        expiring INTEGER,
        PRIMARY KEY (image_id, copy_number)
    );
    CREATE INDEX image_copies_pool ON image_copies(pool);
    CREATE TABLE copy_commits (
        job_id INTEGER NOT NULL,
        image_id TEXT NOT NULL,
        storage_host TEXT NOT NULL,
        pool TEXT NOT NULL,
        partial TEXT NOT NULL,
        final TEXT NOT NULL,
        record TEXT NOT NULL,
        phase TEXT NOT NULL,
        started TEXT NOT NULL,
        PRIMARY KEY (job_id, image_id)
    )
    """,
    # 15: jobs' start and end with sub-second precision (seconds since the epoch), so that a
    # short job's elapsed time and rate come from its own clock rather than whole seconds
    """
    ALTER TABLE jobs ADD COLUMN started_t REAL;
    ALTER TABLE jobs ADD COLUMN ended_t REAL
    """,
    # 16: storage unit groups: ordered storage units and how a job is placed on one of them
    # when it starts (app/stugroups.py). A policy under a group keeps storage_unit_id as the
    # group's first unit; rr_next is where round-robin placement looks first.
    """
    CREATE TABLE storage_unit_groups (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        selection TEXT NOT NULL CHECK (selection IN ('prioritized', 'failover', 'round-robin',
                                                     'least-loaded')),
        rr_next INTEGER NOT NULL DEFAULT 0,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE storage_unit_group_members (
        group_id INTEGER NOT NULL REFERENCES storage_unit_groups(id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        storage_unit_id INTEGER NOT NULL REFERENCES storage_units(id),
        PRIMARY KEY (group_id, position)
    );
    ALTER TABLE policies ADD COLUMN storage_unit_group_id INTEGER
        REFERENCES storage_unit_groups(id)
    """,
    # 17: the backups that ended in the last minutes (least-loaded placement, at every tick of
    # the dispatcher) without reading every ended job of the catalog's history
    """
    CREATE INDEX jobs_state_ended ON jobs(state, ended)
    """,
    # 18: what a running job is doing (scanning, copying, verifying, committing), shown by
    # the CLI's progress lines
    """
    ALTER TABLE jobs ADD COLUMN phase TEXT
    """,
    # 19: a policy's exclude list: a glob on file names (*.tmp) or an absolute path that
    # leaves out a subtree; host_id NULL for every client of the policy, else for that client
    """
    CREATE TABLE policy_excludes (
        id INTEGER PRIMARY KEY,
        policy_id INTEGER NOT NULL REFERENCES policies(id) ON DELETE CASCADE,
        host_id INTEGER REFERENCES hosts(id) ON DELETE CASCADE,
        pattern TEXT NOT NULL
    );
    CREATE INDEX policy_excludes_policy ON policy_excludes(policy_id)
    """,
    # 20: health at a glance (`cairn status`): when the master last heard from each host, and
    # samples of each disk pool's use, from which its growth is told
    """
    ALTER TABLE hosts ADD COLUMN last_contact TEXT;
    CREATE TABLE pool_usage (
        pool_id INTEGER NOT NULL REFERENCES disk_pools(id) ON DELETE CASCADE,
        t REAL NOT NULL,
        size INTEGER NOT NULL,
        used INTEGER NOT NULL,
        PRIMARY KEY (pool_id, t)
    );
    """,
    # 21: alerts (app/alerts/): what was found (a failed job, a pool above its high-water
    # mark, a host down, ...) and the digests that told the admins about it. A condition that
    # holds stays one open event until it clears; it may open again later.
    """
    CREATE TABLE alert_digests (
        id INTEGER PRIMARY KEY,
        t REAL NOT NULL,
        test INTEGER NOT NULL DEFAULT 0,
        events INTEGER NOT NULL,
        delivered INTEGER NOT NULL,
        results TEXT NOT NULL DEFAULT '{}'
    );
    CREATE TABLE alert_events (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        severity TEXT NOT NULL,
        subject TEXT,
        message TEXT NOT NULL,
        job_id INTEGER,
        first_seen REAL NOT NULL,
        cleared REAL,
        digest_id INTEGER REFERENCES alert_digests(id) ON DELETE SET NULL,
        cleared_digest_id INTEGER REFERENCES alert_digests(id) ON DELETE SET NULL
    );
    CREATE UNIQUE INDEX alert_events_open ON alert_events(key) WHERE cleared IS NULL;
    CREATE INDEX alert_events_pending ON alert_events(digest_id);
    """,
    # 22: the client's names of the owners and groups of an image's files, as its backup
    # recorded them (app/formats/owners.py); NULL for images made before
    """
    ALTER TABLE images ADD COLUMN owners TEXT
    """,
    # 23: disk benchmarks of storage servers (app/jobs/benchmark.py), kept to compare runs
    # over time: each run's settings, how it ended and its steps (JSON, one object a step)
    """
    CREATE TABLE benchmark_runs (
        id INTEGER PRIMARY KEY,
        job_id INTEGER REFERENCES jobs(id) ON DELETE SET NULL,
        server TEXT NOT NULL,
        host TEXT NOT NULL,
        workload TEXT NOT NULL,
        io_size INTEGER,
        volumes TEXT NOT NULL,
        started TEXT NOT NULL,
        ended TEXT,
        status INTEGER,
        stopped TEXT,
        cache_bypass TEXT,
        max_combined_mb_s REAL,
        steps TEXT NOT NULL DEFAULT '[]'
    );
    CREATE INDEX benchmark_runs_server ON benchmark_runs(server, id)
    """,
    # 24: object storage benchmarks of a cloud server's bucket (app/jobs/object_benchmark.py)
    # in the same table: their writes and reads run one after the other, not at once, so a
    # run keeps its best write and best read throughput instead of a combined one
    """
    ALTER TABLE benchmark_runs ADD COLUMN max_write_mb_s REAL;
    ALTER TABLE benchmark_runs ADD COLUMN max_read_mb_s REAL
    """,
    # 25: where a policy's backups into deduplicating pools are compressed (server: on the
    # storage server, as before; client: on the client before the chunks cross the network;
    # off) and the zstd level; the old integer column stays unused
    """
    ALTER TABLE policies ADD COLUMN compression_at TEXT NOT NULL DEFAULT 'server';
    ALTER TABLE policies ADD COLUMN compression_level INTEGER NOT NULL DEFAULT 1
    """,
    # 26: Cairn users and their roles (app/users.py): the SSH public keys and the login name
    # a user is known by, the clients' paths a restore-role user may browse and restore
    # (grants) and the hosts' directories it may restore to (destination grants); and the
    # audit log (app/audit.py), each entry carrying the hash of the one before it. A fresh
    # master has one user, admin, with the admin role.
    """
    CREATE TABLE users (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'restore', 'viewer')),
        login TEXT UNIQUE,
        comment TEXT NOT NULL DEFAULT '',
        created TEXT NOT NULL
    );
    CREATE TABLE user_keys (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        key_type TEXT NOT NULL,
        key_data TEXT NOT NULL,
        key_comment TEXT NOT NULL DEFAULT '',
        fingerprint TEXT NOT NULL UNIQUE,
        added TEXT NOT NULL
    );
    CREATE TABLE user_grants (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        kind TEXT NOT NULL CHECK (kind IN ('data', 'dest')),
        host TEXT NOT NULL,
        path TEXT NOT NULL,
        UNIQUE (user_id, kind, host, path)
    );
    INSERT INTO users(name, role, created) VALUES ('admin', 'admin',
        strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));
    CREATE TABLE audit_log (
        seq INTEGER PRIMARY KEY,
        time TEXT NOT NULL,
        user TEXT NOT NULL,
        role TEXT,
        origin TEXT NOT NULL,
        action TEXT NOT NULL,
        object TEXT NOT NULL DEFAULT '',
        outcome TEXT NOT NULL,
        details TEXT NOT NULL DEFAULT '{}',
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL
    );
    CREATE INDEX audit_log_user ON audit_log(user, seq);
    CREATE INDEX audit_log_time ON audit_log(time)
    """,
    # 27: advanced-disk images may be compressed (zstd frames with a seek table): how an
    # image, or a further copy of it, was compressed (JSON; NULL: a plain tar file, or a
    # deduplicating pool's recipe, whose chunks say). Advanced-disk policies were stored
    # uncompressed whatever compression_at said (the default, server, was not applied to
    # them): they become off, so that they keep making plain tar files until an admin
    # chooses otherwise.
    """
    ALTER TABLE images ADD COLUMN compression TEXT;
    ALTER TABLE image_copies ADD COLUMN compression TEXT;
    UPDATE policies SET compression_at = 'off'
     WHERE compression_at <> 'off'
       AND NOT EXISTS (
           SELECT 1 FROM storage_units u JOIN disk_pools d ON d.id = u.pool_id
             JOIN storage_servers s ON s.id = d.server_id
            WHERE s.type <> 'advanced-disk'
              AND (u.id = policies.storage_unit_id
                   OR u.id IN (SELECT storage_unit_id FROM storage_unit_group_members
                                WHERE group_id = policies.storage_unit_group_id)))
    """,
]
