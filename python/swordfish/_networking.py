"""The asyncio networking API (transports, servers, pipes, subprocesses, TLS).

These arrive with swordfish's native transports; until then each method raises a
NotImplementedError that names the gap, instead of AbstractEventLoop's bare one.
"""


def _missing(name):
    return NotImplementedError(
        f"swordfish: loop.{name}() is not available yet: it arrives with the native "
        f"transports (TCP/Unix/UDP, pipes, subprocesses, TLS, sendfile)"
    )


class NetworkingMixin:
    async def create_connection(self, *args, **kwargs):
        raise _missing("create_connection")

    async def create_server(self, *args, **kwargs):
        raise _missing("create_server")

    async def create_unix_connection(self, *args, **kwargs):
        raise _missing("create_unix_connection")

    async def create_unix_server(self, *args, **kwargs):
        raise _missing("create_unix_server")

    async def create_datagram_endpoint(self, *args, **kwargs):
        raise _missing("create_datagram_endpoint")

    async def connect_accepted_socket(self, *args, **kwargs):
        raise _missing("connect_accepted_socket")

    async def start_tls(self, *args, **kwargs):
        raise _missing("start_tls")

    async def sendfile(self, *args, **kwargs):
        raise _missing("sendfile")
