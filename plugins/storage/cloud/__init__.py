"""Cloud pools: a deduplicating pool whose containers, recipes and container indexes live in
an S3 bucket behind a local cache on the storage host. master.py is the master half,
agent.py the agent half over store.py (the dedup store as a cache of the bucket) and
bucket.py (the S3 client); objbench.py benchmarks the bucket; keys.py keeps the bucket's
credentials on the master."""
