"""Deduplicating disk pool (storage server type `dedup`): content-defined chunks stored once.

master.py (with keys.py, the master's keys of encrypted pools) is the master half
(plugins/storage/base.py); agent.py is the agent half (plugins/storage/agent_base.py), over the
chunk store (store.py with encoding.py, containers.py, chunk_index.py, locks.py, writer.py,
reclaim.py and errors.py), the recipes of images (recipe.py), the cutting of streams
(chunker.py, segmenter.py), a backup's ingest (ingest.py), the data-plane messages of
client-side deduplication (wire.py) and whole-pool work (pool.py).

Runs on client hosts too (the agent chunks and fingerprints before sending), so everything the
agent half imports is standard library; faster implementations are used when present.
"""
