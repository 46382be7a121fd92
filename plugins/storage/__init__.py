"""Storage types: the ways a disk pool keeps backup images. Each type is a package here with
two halves: its master half (master.py, a StorageType of plugins/storage/base.py, listed in
plugins/storage/registry.py) and its agent half (agent.py, an AgentStorage of
plugins/storage/agent_base.py, listed in plugins/storage/agents.py), which travels to the
hosts with the rest of the agent. docs/storage-types.md describes the seam.

This package's face holds nothing else: the agent imports the agent halves below it."""
