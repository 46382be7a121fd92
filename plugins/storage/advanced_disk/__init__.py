"""AdvancedDisk (storage server type `advanced-disk`): backup images as plain pax tar files on
the storage server's mounted file systems. master.py is the master half (plugins/storage/
base.py), agent.py and image_check.py the agent half (plugins/storage/agent_base.py)."""
