"""The errors of the Storage Scale provider: one class per case a caller tells apart, each
with its `kind` as the probe reports it."""

from app.errors import CairnError


class ScaleError(CairnError):
    """A Storage Scale command failed; `message` says what, `hint` what to do about it, and
    `kind` which of the cases below it is."""
    kind = "failed"

    def __init__(self, message, hint=None, command=None):
        super().__init__(message, hint=hint)
        self.command = command

    def to_dict(self):
        return {"error": self.message, "hint": self.hint, "kind": self.kind,
                "command": self.command}


class DaemonDown(ScaleError):
    kind = "daemon_down"


class NotInCluster(ScaleError):
    kind = "not_in_cluster"


class PermissionDenied(ScaleError):
    kind = "permission_denied"


class CommandTimeout(ScaleError):
    kind = "timeout"


class CommandFailed(ScaleError):
    kind = "failed"


class NodeUnreachable(ScaleError):
    """A command needed another node of the cluster and could not reach it."""
    kind = "node_unreachable"


class SnapshotNotFound(CommandFailed):
    kind = "snapshot_not_found"


class InvalidArgument(ScaleError, ValueError):
    """A request this provider refuses before running anything (a relative path, a snapshot
    name the commands would misread)."""
    kind = "invalid"


class Interrupted(ScaleError):
    """is_cancelled() turned true while a command ran; the command was stopped."""
    kind = "canceled"
