"""The parts of the asyncio transport API that are not there yet.

Each method raises a NotImplementedError that names the gap, instead of
AbstractEventLoop's bare one. (Connections, servers and datagram endpoints live in
_connections.py, _servers.py and _datagram.py.)
"""


def _missing(name):
    return NotImplementedError(
        f"swordfish: loop.{name}() is not available yet: it arrives with the native "
        f"transports"
    )


class NetworkingMixin:
    pass
