"""A TCP proxy between worker processes and the database, that can misbehave on cue (§17).

:class:`FaultProxy` listens on 127.0.0.1 (its :attr:`~FaultProxy.port`) and
forwards every connection to PostgreSQL (127.0.0.1:5432) or MariaDB
(127.0.0.1:3306). Asyncio in a background thread; no dependency. A test
points a worker at it with ``LEASEJOBS_TEST_DB_PORT`` (tests/settings.py) and
then chooses what the network does:

* :meth:`~FaultProxy.delay` -- every chunk, each direction, waits
  ``seconds ± jitter`` (a round trip: twice that);
* :meth:`~FaultProxy.blackhole` -- every packet dropped both ways, silently:
  sockets stay open, nothing is reset. A proxy that only stopped forwarding
  would not do: its kernel would still ACK what the worker sends (and its
  keepalive probes), so the worker's TCP could never notice. Each socket of
  the proxy gets a socket filter that drops every packet before TCP sees it
  (``SO_ATTACH_FILTER``, no privilege needed): no ACK goes back, as on a dead
  network, and a connection attempt's SYN is dropped too;
* :meth:`~FaultProxy.reset` -- every connection closed with a RST (``SO_LINGER`` 0);
* :meth:`~FaultProxy.cut_after_reply` -- the first client message that
  contains *match* (a PostgreSQL ``Query``/``Parse`` message, a MariaDB
  ``COM_QUERY``/``COM_STMT_PREPARE``) goes to the server; once the server's
  whole reply to it has arrived at the proxy (PostgreSQL: up to
  ``ReadyForQuery``; MariaDB: its OK/ERR/EOF packet) the connection is cut
  (RST both ways) and the reply never reaches the client: the server did
  the work, the client cannot know. Decided on the protocol's framing, never
  on timing;
* :meth:`~FaultProxy.heal` -- back to pass-through (a blackholed connection
  carries on where it stopped, as after a real outage, unless its client gave up).

The proxy keeps the protocols parseable: it answers PostgreSQL's
``SSLRequest``/``GSSENCRequest`` with "no" itself, and hides the SSL
capability of a MariaDB server's greeting.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import random
import socket
import struct
import threading
from dataclasses import dataclass, field

POSTGRESQL, MARIADB = "postgresql", "mysql"
UPSTREAM = {POSTGRESQL: 5432, MARIADB: 3306}

_SO_ATTACH_FILTER, _SO_DETACH_FILTER = 26, 27
_PG_SSL_REQUEST, _PG_GSSENC_REQUEST = 80877103, 80877104
_MARIADB_CLIENT_SSL = 0x0800
_MARIADB_COM_QUERY, _MARIADB_COM_STMT_PREPARE = 0x03, 0x16


class _Instruction(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_uint16), ("filter", ctypes.POINTER(_Instruction))]


_DROP_ALL = (_Instruction * 1)(_Instruction(0x06, 0, 0, 0))  # BPF_RET|BPF_K 0: keep 0 bytes
_DROP_PROGRAM = _Program(1, _DROP_ALL)
_DROP_FILTER = ctypes.string_at(ctypes.addressof(_DROP_PROGRAM), ctypes.sizeof(_DROP_PROGRAM))


def _deaf(sock, deaf: bool) -> None:
    """Make the kernel drop (or again accept) every packet that arrives for *sock*."""
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed, or no filter to detach
        if deaf:
            sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, _DROP_FILTER)
        else:
            sock.setsockopt(socket.SOL_SOCKET, _SO_DETACH_FILTER, 0)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a RST, not a FIN (``SO_LINGER`` on, 0 s)."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class _Framing:
    """Splits one direction of a connection into the protocol's messages."""

    def __init__(self, protocol: str, from_client: bool):
        self.protocol = protocol
        self.from_client = from_client
        self.buffer = bytearray()
        # PostgreSQL: the client's first messages (startup, SSL/GSS requests) have no type byte.
        self.startup = protocol == POSTGRESQL and from_client

    def feed(self, data: bytes) -> list[bytes]:
        self.buffer += data
        messages = []
        while (message := self._next()) is not None:
            messages.append(message)
        return messages

    def _next(self) -> bytes | None:
        if self.protocol == POSTGRESQL:
            head = 4 if self.startup else 5
            if len(self.buffer) < head:
                return None
            length = struct.unpack("!I", self.buffer[head - 4 : head])[0] + head - 4
        else:
            if len(self.buffer) < 4:
                return None
            length = 4 + int.from_bytes(self.buffer[:3], "little")
        if len(self.buffer) < length:
            return None
        message = bytes(self.buffer[:length])
        del self.buffer[:length]
        return message


def _matches(protocol: str, message: bytes, match: bytes) -> bool:
    """Whether *message* (from the client) is a statement containing *match* (any case)."""
    if protocol == POSTGRESQL:
        statement = message[:1] in (b"Q", b"P")
    else:
        statement = (
            message[3] == 0
            and len(message) > 4
            and message[4]
            in (
                _MARIADB_COM_QUERY,
                _MARIADB_COM_STMT_PREPARE,
            )
        )
    return statement and match.lower() in message.lower()


def _ends_reply(protocol: str, message: bytes) -> bool:
    """Whether *message* (from the server) completes its reply to a statement."""
    if protocol == POSTGRESQL:
        return message[:1] == b"Z"  # ReadyForQuery
    first = message[4] if len(message) > 4 else None
    # OK, ERR, or an EOF (0xfe with a short payload; a statement without a result set
    # replies with one OK/ERR packet, which is what a fault test cuts after).
    return first in (0x00, 0xFF) or (first == 0xFE and len(message) < 4 + 9)


@dataclass(eq=False)  # hashed by identity: the proxy keeps a set of them
class _Link:
    """One proxied connection: the worker's side and the server's side."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    doomed: bool = False  # a cut_after_reply matched: cut when the reply is complete
    tasks: list[asyncio.Task] = field(default_factory=list)

    def sockets(self) -> list:
        return [w.get_extra_info("socket") for w in (self.client, self.server)]


class FaultProxy:
    """A proxy to the database on this machine that injects the faults of §17 on cue.

    ``with FaultProxy("postgresql") as proxy:`` -- then point a worker at ``proxy.port``.
    """

    def __init__(self, protocol: str, upstream_port: int | None = None):
        assert protocol in UPSTREAM, f"no proxy for {protocol!r}: postgresql or mysql"
        self.protocol = protocol
        self.upstream_port = upstream_port or UPSTREAM[protocol]
        self.port = 0
        self.connections = 0  # accepted since start, a test's evidence that traffic went through
        self.cuts = 0  # connections cut by cut_after_reply
        self._delay: tuple[float, float] | None = None
        self._blackholed = False
        self._match: bytes | None = None
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None
        self._healed = asyncio.Event()
        self._healed.set()

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._thread.start()
        self._call(self._listen())
        return self

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- faults -------------------------------------------------------------------------

    def delay(self, seconds: float, jitter: float = 0.0) -> None:
        """Hold every chunk, each direction, ``seconds ± jitter`` (uniform) before it goes on."""
        self._call(self._set(delay=(seconds, jitter)))

    def blackhole(self) -> None:
        """Drop every packet of every connection (and of new ones), both ways, silently."""
        self._call(self._set(blackholed=True))

    def reset(self) -> None:
        """Close every open connection with a RST, both sides."""
        self._call(self._reset())

    def cut_after_reply(self, match: bytes) -> None:
        """Cut the connection whose client next sends a statement containing *match*, once the
        server's reply is complete and before the client receives it (:attr:`cuts` counts them)."""
        self._call(self._set(match=match))

    def heal(self) -> None:
        """Back to pass-through: no delay, no blackhole, no pending cut."""
        self._call(self._set(delay=None, blackholed=False, match=None))

    @property
    def open_connections(self) -> int:
        return len(self._links)

    # -- inside the proxy's thread ------------------------------------------------------

    def _call(self, coroutine) -> object:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for link in list(self._links):
            for task in link.tasks:
                task.cancel()
            _abort(link.client)
            _abort(link.server)
        self._links.clear()

    async def _set(self, **changes: object) -> None:
        if "delay" in changes:
            self._delay = changes["delay"]  # type: ignore[assignment]
        if "match" in changes:
            self._match = changes["match"]  # type: ignore[assignment]
        if "blackholed" in changes:
            self._blackholed = bool(changes["blackholed"])
            deaf = self._blackholed
            assert self._server is not None
            for listening in self._server.sockets:
                _deaf(listening, deaf)
            for link in self._links:
                for sock in link.sockets():
                    _deaf(sock, deaf)
            if deaf:
                self._healed.clear()
            else:
                self._healed.set()

    async def _reset(self) -> None:
        for link in list(self._links):
            self._cut(link)

    def _cut(self, link: _Link) -> None:
        for task in link.tasks:
            task.cancel()
        _abort(link.client)
        _abort(link.server)
        self._links.discard(link)

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.connections += 1
        try:
            server_r, server_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _abort(client_w)
            return
        link = _Link(client_w, server_w)
        if self._blackholed:
            for sock in link.sockets():
                _deaf(sock, True)
        self._links.add(link)
        link.tasks = [
            asyncio.ensure_future(self._pump(link, client_r, server_w, from_client=True)),
            asyncio.ensure_future(self._pump(link, server_r, client_w, from_client=False)),
        ]
        await asyncio.gather(*link.tasks, return_exceptions=True)
        self._links.discard(link)

    async def _pump(self, link: _Link, reader, writer, *, from_client: bool) -> None:
        """Carry one direction: a reader that stamps each chunk with when it may go on
        (now + the delay, never before the chunk ahead of it: latency, not a queue of
        sleeps), and a sender that holds it until then -- and through a blackhole."""
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        sender = asyncio.ensure_future(self._send(link, chunks, writer, from_client))
        link.tasks.append(sender)
        due = 0.0
        try:
            while data := await reader.read(65536):
                wait = 0.0
                if self._delay is not None:
                    seconds, jitter = self._delay
                    wait = max(0.0, random.uniform(seconds - jitter, seconds + jitter))
                due = max(due, loop.time() + wait)
                chunks.put_nowait((due, data))
            chunks.put_nowait((due, b""))  # the peer closed: close the other side, in order
            await sender
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            if link in self._links:
                self._cut(link)

    async def _send(self, link: _Link, chunks, writer, from_client: bool) -> None:
        framing = _Framing(self.protocol, from_client)
        loop = asyncio.get_running_loop()
        try:
            while True:
                due, data = await chunks.get()
                await asyncio.sleep(max(0.0, due - loop.time()))
                await self._healed.wait()  # what was read before a blackhole goes on after it
                if not data:
                    break
                for message in framing.feed(data):
                    if not await self._forward(link, framing, message, writer, from_client):
                        return
        except OSError:
            pass
        finally:
            if link in self._links:
                self._cut(link)

    async def _forward(self, link, framing, message: bytes, writer, from_client: bool) -> bool:
        """Pass *message* on, or answer or cut instead; False when the connection is cut."""
        if from_client and framing.startup:
            code = struct.unpack("!I", message[4:8])[0] if len(message) >= 8 else 0
            if code in (_PG_SSL_REQUEST, _PG_GSSENC_REQUEST):
                link.client.write(b"N")  # "not here": the client goes on in plain text
                await link.client.drain()
                return True
            framing.startup = False  # the startup message proper; typed messages follow
        elif (
            from_client
            and self._match is not None
            and _matches(self.protocol, message, self._match)
        ):
            self._match = None
            link.doomed = True
        elif not from_client and link.doomed and _ends_reply(self.protocol, message):
            self.cuts += 1
            self._cut(link)
            return False
        elif not from_client and self.protocol == MARIADB and message[3] == 0 and len(message) > 5:
            message = _without_ssl(message)
        writer.write(message)
        await writer.drain()
        return True


def _without_ssl(greeting: bytes) -> bytes:
    """A MariaDB server's greeting (packet 0) with its SSL capability hidden."""
    if greeting[4] != 10:  # not a protocol-10 greeting
        return greeting
    version_end = greeting.index(b"\0", 5)
    flags_at = version_end + 1 + 4 + 8 + 1  # connection id, scramble part 1, filler
    flags = int.from_bytes(greeting[flags_at : flags_at + 2], "little") & ~_MARIADB_CLIENT_SSL
    return greeting[:flags_at] + flags.to_bytes(2, "little") + greeting[flags_at + 2 :]
