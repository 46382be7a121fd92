"""Errors raised inside the agent. Each becomes an `error` message on the protocol with its
status code, so the master can tell a full disk from a missing path without parsing text."""

import traceback

from app import status
from app.errors import CairnError


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


def error_message(op, e):
    """The protocol's error message for an exception that ended operation `op`: its status
    code and text, and for an unforeseen one the trace."""
    if isinstance(e, AgentFailure):
        return {"code": e.code, "message": e.message}
    if isinstance(e, TypeError):
        return {"code": 10, "message": f"{op}: {e}"}
    if isinstance(e, CairnError):
        # errors of the shared modules (the dedup pool's) carry their own status and hint
        return {"code": e.status, "message": str(e)}
    if isinstance(e, OSError):
        where = f" ({e.filename})" if e.filename else ""
        return {"code": 99, "message": f"{op}: {e.strerror or e}{where}"}
    return {"code": 99, "message": f"{op} failed: {type(e).__name__}: {e}",
            "trace": traceback.format_exc()}
