"""What a job's run ends with (app/jobs/dispatcher.py records it): its status code, the
message that goes with it, the image it made, and the bytes and files it moved."""

from dataclasses import dataclass
from typing import Optional

from app import status


@dataclass(frozen=True)
class JobResult:
    status: int = status.OK
    message: Optional[str] = None
    image_id: Optional[str] = None
    bytes: Optional[int] = None
    files: Optional[int] = None
