"""Cloud pools: a deduplicating pool whose containers, recipes and chunk index live in an S3
bucket behind a local cache on the storage host. Built so far: the bucket as the storage
host's agent reaches it (bucket.py) and the benchmark of the bucket (objbench.py). The
storage type itself is not registered yet (plugins/storage/registry.py PLANNED says so to
whoever asks for it)."""
