"""How a connection notices that its peer is gone: a host that loses power or its network
sends no reset, and without help TCP retransmits for about fifteen minutes before a blocked
send fails (a receive with nothing outstanding waits forever). The control plane's SSH
connections and the data plane's connections both use this, on the master and in the agents
(this file travels in the agent bundle), so a storage host that dies in the night fails its
jobs within about DEAD_PEER_SECONDS and their retries go elsewhere. process_alive tells
whether a process of this host is still there (a benchmark run whose agent was killed left
files that the next run removes)."""

import os
import socket

# Long enough for a network blip or a failover of a switch, short enough that a night's
# schedule is not held by a dead host. A peer that is alive but slow still acknowledges
# (a full receive window answers the sender's probes), so slowness alone never trips it.
DEAD_PEER_SECONDS = 30


def process_alive(pid):
    """Whether process `pid` of this host exists (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_peer(sock, seconds=DEAD_PEER_SECONDS):
    """Makes the socket fail when the peer has not acknowledged data for `seconds`, or has
    not answered keepalive probes for about as long while the connection is idle. Options
    the platform lacks are left out."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", max(1, seconds // 3)),
                        ("TCP_KEEPINTVL", max(1, seconds // 6)),
                        ("TCP_KEEPCNT", 4),
                        ("TCP_USER_TIMEOUT", seconds * 1000)):
        option = getattr(socket, name, None)
        if option is None:
            continue
        try:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)
        except OSError:
            pass
