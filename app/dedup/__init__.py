"""Deduplicating disk pool (storage server type `dedup`): content-defined chunks stored once.

Runs on client hosts too (the agent chunks and fingerprints before sending), so everything
imported at module load is standard library; faster implementations are used when present.
"""
