"""`create_datagram_endpoint`: UDP (IPv4/IPv6) and Unix datagram sockets, bound and/or
connected, or a socket given by the caller, wrapped in the loop's datagram transport."""

import socket
import warnings
from asyncio.log import logger

from ._compat import PY311, PY313
from ._connections import is_abstract_unix_path, set_reuse_port, version_keywords
from ._servers import remove_stale_unix_socket


class _Unset:
    """Default of 3.10's deprecated `reuse_address` (None and False mean something)."""

    def __repr__(self):
        return "<unset>"


_UNSET = _Unset()


def _check_given_socket(sock, options):
    if PY313:
        if sock.type == socket.SOCK_STREAM:
            raise ValueError(f"A datagram socket was expected, got {sock!r}")
    elif sock.type != socket.SOCK_DGRAM:
        raise ValueError(f"A UDP Socket was expected, got {sock!r}")
    given = {name: value for name, value in options.items() if value}
    if given:
        problems = ", ".join(f"{name}={value}" for name, value in given.items())
        raise ValueError(
            f"socket modifier keyword arguments can not be used when sock is specified. "
            f"({problems})"
        )


def _check_reuse_address(reuse_address):
    # Python 3.10 only (the keyword is gone in 3.11): SO_REUSEADDR on UDP lets another
    # process steal the port, so True is refused and False is deprecated.
    if reuse_address is _UNSET:
        return
    if reuse_address:
        raise ValueError(
            "Passing `reuse_address=True` is no longer supported, as the usage of "
            "SO_REUSEPORT in UDP poses a significant security concern."
        )
    warnings.warn(
        "The *reuse_address* parameter has been deprecated as of 3.5.10 and is "
        "scheduled for removal in 3.11.",
        DeprecationWarning,
        stacklevel=3,
    )


class DatagramMixin:
    @version_keywords(removed={"reuse_address": (3, 11)})
    async def create_datagram_endpoint(
        self,
        protocol_factory,
        local_addr=None,
        remote_addr=None,
        *,
        family=0,
        proto=0,
        flags=0,
        reuse_address=_UNSET,
        reuse_port=None,
        allow_broadcast=None,
        sock=None,
    ):
        if sock is not None:
            options = dict(
                local_addr=local_addr, remote_addr=remote_addr, family=family, proto=proto,
                flags=flags, reuse_port=reuse_port, allow_broadcast=allow_broadcast,
            )
            if reuse_address is not _UNSET and reuse_address:
                options["reuse_address"] = reuse_address
            _check_given_socket(sock, options)
            sock.setblocking(False)
            remote = None
            own_sock = False
        else:
            candidates = await self._datagram_address_pairs(
                local_addr, remote_addr, family, proto, flags
            )
            _check_reuse_address(reuse_address)
            sock, remote = await self._open_datagram_socket(
                candidates, local_addr, remote_addr, reuse_port, allow_broadcast
            )
            own_sock = True

        try:
            protocol = protocol_factory()
            waiter = self.create_future()
            transport = self._make_datagram_transport(sock, protocol, remote, waiter)
        except BaseException:
            if own_sock:
                sock.close()
            raise
        if self.get_debug():
            if local_addr:
                logger.info(
                    "Datagram endpoint local_addr=%r remote_addr=%r created: (%r, %r)",
                    local_addr, remote_addr, transport, protocol,
                )
            else:
                logger.debug(
                    "Datagram endpoint remote_addr=%r created: (%r, %r)",
                    remote_addr, transport, protocol,
                )
        try:
            await waiter
        except BaseException:
            transport.close()
            raise
        return transport, protocol

    async def _datagram_address_pairs(self, local_addr, remote_addr, family, proto, flags):
        """[((family, proto), (local address, remote address)), ...] to try in order."""
        if not (local_addr or remote_addr):
            if family == 0:
                raise ValueError("unexpected address family")
            return [((family, proto), (None, None))]

        if family == getattr(socket, "AF_UNIX", None):
            for address in (local_addr, remote_addr):
                if address is not None and not isinstance(address, str):
                    raise TypeError("string is expected")
            if local_addr and not is_abstract_unix_path(local_addr):
                remove_stale_unix_socket(local_addr)
            return [((family, proto), (local_addr, remote_addr))]

        # Pair the local and remote addresses by (family, protocol), keeping the order in
        # which they resolved.
        pairs = {}
        for index, address in ((0, local_addr), (1, remote_addr)):
            if address is None:
                continue
            if not (isinstance(address, tuple) and len(address) == 2):
                if not PY311:
                    raise AssertionError("2-tuple is expected")
                raise TypeError("2-tuple is expected")
            infos = await self._ensure_resolved(
                address, family=family, type=socket.SOCK_DGRAM, proto=proto, flags=flags
            )
            if not infos:
                raise OSError("getaddrinfo() returned empty list")
            for info_family, _, info_proto, _, resolved in infos:
                pairs.setdefault((info_family, info_proto), [None, None])[index] = resolved
        usable = [
            (key, pair)
            for key, pair in pairs.items()
            if not ((local_addr and pair[0] is None) or (remote_addr and pair[1] is None))
        ]
        if not usable:
            raise ValueError("can not get address information")
        return usable

    async def _open_datagram_socket(
        self, candidates, local_addr, remote_addr, reuse_port, allow_broadcast
    ):
        """The first (family, proto) that gives a socket which binds and connects as asked:
        (socket, remote address for the transport or None)."""
        errors = []
        for (family, proto), (local_address, remote_address) in candidates:
            sock = None
            try:
                sock = socket.socket(family=family, type=socket.SOCK_DGRAM, proto=proto)
                if reuse_port:
                    set_reuse_port(sock)
                if allow_broadcast:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
                sock.setblocking(False)
                if local_addr:
                    sock.bind(local_address)
                remote = None
                if remote_addr:
                    if not allow_broadcast:
                        await self.sock_connect(sock, remote_address)
                    remote = remote_address
                return sock, remote
            except OSError as exc:
                if sock is not None:
                    sock.close()
                errors.append(exc)
            except BaseException:
                if sock is not None:
                    sock.close()
                raise
        try:
            raise errors[0]
        finally:
            errors = None
