"""AdvancedDisk (storage server type `advanced-disk`): backup images as pax tar files on the
storage server's mounted file systems, plain or zstd compressed in independent frames
(zframes.py). master.py is the master half (plugins/storage/base.py), agent.py, zframes.py
and image_check.py the agent half (plugins/storage/agent_base.py)."""
