"""Runs inside the sandbox, between ``valuecodec.py`` and a harness: how a harness reads its request.

Fd 0 carries ``<length>\\n<request>`` and then control messages, so it is read unbuffered and by length;
a buffered reader would swallow the control messages that follow.
"""

import os as _os


def _read_request():
    """``<length>\\n<request>`` from fd 0, read unbuffered: the rest of stdin carries control messages."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = _os.read(0, 1)
        if not chunk:
            return data
        data += chunk
    size, parts = int(data), []
    while size > 0:
        chunk = _os.read(0, min(size, 1 << 20))
        if not chunk:
            break
        parts.append(chunk)
        size -= len(chunk)
    return b"".join(parts)
