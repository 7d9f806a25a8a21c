"""Small durability helpers shared by the fragment stores and the embedded broker."""

from __future__ import annotations

import os


def fsync_dir(path: str) -> None:
    """fsync a directory, so renames and new entries in it survive a crash."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
