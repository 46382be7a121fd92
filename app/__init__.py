"""Cairn core: catalog, master API, jobs, transports and the agent. No Qt here."""

__version__ = "0.1.0"
