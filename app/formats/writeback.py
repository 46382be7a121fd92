"""Starting the writeback of dirty pages early (Linux's sync_file_range), so that the fsync
that makes a file durable at its end finds most of it on disk already instead of writing it
all while the caller waits. Standard library only: this runs on every host."""

SYNC_FILE_RANGE_WRITE = 2


def _sync_file_range():
    """The C library's sync_file_range, or None where there is no such call."""
    try:
        import ctypes
        # the process's own symbols, libc's among them: finding libc by name runs
        # `ldconfig -p`, a process at every agent's start
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
        fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
        return fn
    except (OSError, AttributeError):
        return None


_SFR = _sync_file_range()


def start_writeback(fd, offset, length):
    """Ask the kernel to start writing [offset, offset + length) of fd back, without waiting.
    A hint only: nothing happens where the call is missing or fails."""
    if _SFR is not None and length > 0:
        _SFR(fd, offset, length, SYNC_FILE_RANGE_WRITE)
