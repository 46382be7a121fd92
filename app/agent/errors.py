"""Errors raised inside the agent. Each becomes an `error` message on the protocol with its
status code, so the master can tell a full disk from a missing path without parsing text."""

from app import status


class AgentFailure(Exception):
    code = status.INTERNAL

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class Cancelled(AgentFailure):
    code = status.CANCELED

    def __init__(self, message="canceled by the administrator"):
        super().__init__(message)


class NothingToBackup(AgentFailure):
    code = status.NOTHING_TO_BACKUP


class StorageFailure(AgentFailure):
    code = status.STORAGE_WRITE_FAILED


class InvalidRequest(AgentFailure):
    code = status.INVALID_REQUEST


class RestoreTargetInvalid(AgentFailure):
    code = status.RESTORE_TARGET_INVALID


class DataPlaneFailure(AgentFailure):
    code = status.DATA_PLANE_FAILED
