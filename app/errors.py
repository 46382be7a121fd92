"""Errors that reach the user, in the master and in the agent alike. Each carries a status
code from app.status and a message that names what is wrong and, where it can, how to fix
it. Nothing else should reach a user: an error that ends an agent's operation travels to
the master as its status and text (app/formats/protocol.py, error_message) and is raised
there again with them."""

from app import status


class CairnError(Exception):
    status = status.INTERNAL

    def __init__(self, message, *, hint=None, status_code=None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if status_code is not None:
            self.status = status_code

    @property
    def code(self):
        """The status code, under the name the agent protocol gives it."""
        return self.status

    def __str__(self):
        return self.message if not self.hint else f"{self.message}\n  {self.hint}"

    def to_dict(self):
        return {"error": self.message, "hint": self.hint, "status": self.status,
                "kind": type(self).__name__}


class ValidationError(CairnError):
    status = status.INVALID_REQUEST


class NotFound(ValidationError):
    pass


class HostUnreachable(CairnError):
    status = status.HOST_UNREACHABLE


class AuthFailed(CairnError):
    status = status.AUTH_FAILED


class HostKeyUnknown(CairnError):
    status = status.HOST_KEY_UNKNOWN

    def __init__(self, message, *, fingerprint, key_type, hint=None):
        super().__init__(message, hint=hint)
        self.fingerprint = fingerprint
        self.key_type = key_type


class HostKeyChanged(CairnError):
    status = status.HOST_KEY_CHANGED


class NoPython(CairnError):
    status = status.NO_PYTHON


class AgentError(CairnError):
    """The agent reported an error, or the connection to it broke."""
    status = status.AGENT_FAILED


class StorageError(CairnError):
    status = status.STORAGE_WRITE_FAILED


class Canceled(CairnError):
    status = status.CANCELED

    def __init__(self, message="canceled by the administrator", **kw):
        super().__init__(message, **kw)


class NothingToBackup(CairnError):
    status = status.NOTHING_TO_BACKUP


class RestoreTargetInvalid(CairnError):
    status = status.RESTORE_TARGET_INVALID


class DataPlaneError(CairnError):
    status = status.DATA_PLANE_FAILED


class PermissionDenied(CairnError):
    """The master refused a request: the Cairn user's role or grants do not allow it (or the
    user is unknown). Every refusal is also written to the audit log."""
    status = status.PERMISSION_DENIED

    def __init__(self, message, *, user=None, role=None, action=None, hint=None):
        super().__init__(message, hint=hint)
        self.user, self.role, self.action = user, role, action

    def to_dict(self):
        return {**super().to_dict(), "user": self.user, "role": self.role,
                "action": self.action}
