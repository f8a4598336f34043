"""Each process of a multi-process run keeps a TCP connection to one other
and hears, from the operating system, when that one is lost.

A process whose node lost power, rebooted or dropped off the network says
nothing more, and the others wait for it in NetKet's collectives, where
the run's thread runs no Python. A thread of each process waits on the
connection instead:

    watch = PeerWatch(store, "checkpoint:peers:1a2b", index, count, on_lost).start()
    ...                 # the run; on_lost(peer, why, host) may be called once, from the watch's thread
    watch.close()       # the run ended through Python: its listener is told, and stops listening

Process ``i`` connects to process ``(i + 1) % count`` (its neighbour) and
accepts the connection of process ``i - 1``. The connection carries no
data until the end; TCP keepalive probes, sent and answered by the two
kernels, say whether the neighbour's host still answers. The kernel
answers them whatever the process does: a thread that compiles for
minutes, a save that writes for an hour, an interpreter held by one C
call, a process stopped by SIGSTOP. So a live process is never lost;
what is lost is a process whose host does not answer for ``lost_after``
seconds (powered off, cut off the network), whose host answers for a
connection it no longer knows (rebooted: the connection is reset), or
whose connection ended without its word (the process was killed). A
process that ends its run through Python sends ``end`` first, and is no
longer listened for. Until a first connection succeeds nothing is judged
(a firewall between the nodes leaves the watch mute, never wrong).

The coordination service (``store``) only carries the addresses: one put
and one read per process and run, none per second, whatever the number of
processes. A store that does not answer delays the first connection,
never the watch: process 0's silence is heard on its connection like any
other's.
"""

from __future__ import annotations

import atexit
import errno
import select
import socket
import threading
import time
from typing import Callable

from .coordination import KeyValueStore, StoreTimeout

END = b"end"
# A host silent this long is lost: shorter than the briefest outage that
# ends a job FAILED (a node back before SLURM marks it down makes srun
# abort the step; a real node's reboot takes longer than this), longer
# than a loaded network's lost packets (TCP's own retransmissions
# recover those within a few seconds).
LOST_AFTER = 15.0
RETRY = 2.0  # seconds between attempts to read the neighbour's address and connect to it
ADDRESS_WAIT = 10.0  # seconds one read of the neighbour's address waits in the store
UNREACHABLE_WARNING = 120.0  # seconds without a first connection before the watch says it is mute


def keepalive(lost_after: float) -> tuple[int, int, int]:
    """TCP keepalive settings (idle seconds, seconds between probes, probes)
    under which the kernel drops a connection whose peer has not answered
    for about ``lost_after`` seconds: idle + probes x interval."""
    interval = max(1, round(lost_after / 5))
    probes = max(1, round((lost_after - interval) / interval))
    return interval, interval, probes


class PeerWatch:
    """One process's watch of its neighbour (see the module's docstring).
    ``on_lost(peer, why, host)``: ``why`` says in a few words how it was
    lost; ``host``: its host stopped answering (nothing the script does
    makes that happen again), else its process ended."""

    def __init__(
        self,
        store: KeyValueStore,
        name: str,
        index: int,
        count: int,
        on_lost: Callable[[int, str, bool], None],
        *,
        host: str,
        lost_after: float = LOST_AFTER,
        say: Callable[[str], None] = lambda message: None,
    ):
        self.store, self.name, self.index = store, name, index
        self.peer = (index + 1) % count
        self.host = host
        self.lost_after = lost_after
        self.on_lost = on_lost
        self.say = say
        self.listening = True
        self.connected = threading.Event()  # set once the neighbour's connection is made: from then on it is judged
        self._server: socket.socket | None = None
        self._accepted: list[socket.socket] = []  # the listener's connections to this process
        self._closed = threading.Event()
        self._wake_read, self._wake_write = socket.socketpair()  # close() wakes the thread at once
        self._lock = threading.Lock()  # the thread's accepts and the closing word do not cross
        self._thread = threading.Thread(target=self._run, name=f"nkserde peer watch {index}", daemon=True)

    def start(self) -> PeerWatch:
        """Opens this process's socket and starts the watch's thread, which
        publishes its address and connects to the neighbour; :meth:`close`
        ends it (at the interpreter's exit at the latest). Returns the watch."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        server = socket.socket(family, socket.SOCK_STREAM)
        try:
            server.bind((self.host, 0))
            server.listen(socket.SOMAXCONN)
            server.setblocking(False)
        except OSError:
            server.close()
            raise
        self._server = server
        atexit.register(self.close)
        self._thread.start()
        return self

    @property
    def address(self) -> bytes:
        host, port = self._server.getsockname()[:2]
        return f"{host} {port}".encode()

    def _run(self) -> None:
        try:
            self.store.put(f"{self.name}/{self.index}", self.address)
            connection = self._connect()
            if connection is not None:
                self.connected.set()
                with connection:
                    self._listen(connection)
        except Exception as exc:  # noqa: BLE001  (a thread's error would go unseen; the run goes on)
            if not self._closed.is_set():
                self.say(f"the watch of process {self.peer} stopped: {type(exc).__name__}: {exc}")
        finally:
            self._accept_waiting()

    def _connect(self) -> socket.socket | None:
        """The connection to the neighbour, once its address is published
        and it accepts; None if the watch is closed first."""
        started, warned = time.monotonic(), False
        address = None
        while not self._closed.is_set():
            self._accept_waiting()
            problem = ""
            try:
                if address is None:
                    host, port = self.store.get(f"{self.name}/{self.peer}", ADDRESS_WAIT).decode().split()
                    address = (host, int(port))
                return self._open(address)
            except StoreTimeout:
                problem = "it published no address"
            except OSError as exc:
                problem = f"connecting to {address[0]} port {address[1]}: {exc.strerror or exc}"
            if not warned and time.monotonic() - started > UNREACHABLE_WARNING:
                warned = True
                self.say(
                    f"cannot reach process {self.peer} ({problem}): a node of the run that is lost will not "
                    "be heard; TCP connections between the job's nodes must be allowed, as JAX's are"
                )
            self._closed.wait(RETRY)
        return None

    def _open(self, address) -> socket.socket:
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        connection = socket.socket(family, socket.SOCK_STREAM)
        try:
            connection.settimeout(RETRY)
            connection.connect(address)
            idle, interval, probes = keepalive(self.lost_after)
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, probes)
            # Linux: the same bound on the probes' answers, and on the word at the end
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(self.lost_after * 1000))
            connection.setblocking(False)
        except OSError:
            connection.close()
            raise
        return connection

    def _listen(self, connection: socket.socket) -> None:
        """Waits on the connection until the neighbour's word, its loss, or
        this watch's close; accepts the listener's connections meanwhile."""
        said = b""
        while not self._closed.is_set():
            server = self._server
            try:
                ready, _, _ = select.select([connection, self._wake_read, *([server] if server else [])], [], [])
            except (OSError, ValueError):  # a socket closed by close() meanwhile
                return
            if server is not None and server in ready:
                self._accept_waiting()
            if connection not in ready:
                continue
            try:
                data = connection.recv(64)
            except BlockingIOError:
                continue
            except OSError as exc:
                why, host = lost_because(exc, self.lost_after), exc.errno in HOST_SILENT
            else:
                said = (said + data)[-len(END) :]
                if said == END:  # its run ended through Python: nothing to judge
                    self.listening = False
                    return
                if data:
                    continue
                why, host = "its process ended without a word: killed, or out of memory", False
            self.listening = False
            if not self._closed.is_set():
                self.on_lost(self.peer, why, host)
            return

    def _accept_waiting(self) -> None:
        """Accepts the connections waiting on this process's socket (the
        listener's), so that the word at the end reaches them."""
        with self._lock:
            if self._server is None:
                return
            while True:
                try:
                    accepted, _ = self._server.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:  # a connection reset while it waited
                    continue
                self._accepted.append(accepted)

    def close(self) -> None:
        """This process's run ended through Python: ``end`` is sent to its
        listener, the sockets closed, and the thread ends."""
        atexit.unregister(self.close)
        if self._closed.is_set():
            return
        self._closed.set()
        self._wake_write.send(b"x")
        self._accept_waiting()
        with self._lock:
            for accepted in self._accepted:
                try:
                    accepted.setblocking(False)
                    accepted.send(END)
                except OSError:  # the listener is gone
                    pass
                accepted.close()
            self._accepted.clear()
            if self._server is not None:
                self._server.close()
                self._server = None
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(RETRY + 1.0)
        self._wake_read.close()
        self._wake_write.close()


# the errors of a connection whose peer's host stopped answering
HOST_SILENT = (errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH)


def lost_because(error: OSError, lost_after: float) -> str:
    """How a neighbour whose connection failed with ``error`` was lost, in
    a user's words."""
    if error.errno in HOST_SILENT:
        return f"its host did not answer for {lost_after:.0f} s: its node down or cut off the network"
    if error.errno == errno.ECONNRESET:
        return "its connection was reset: its node restarted, or the process was killed"
    return f"its connection failed: {error.strerror or error}"
