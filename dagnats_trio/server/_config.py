"""The config file of one nats-server node, and how to read back the port it picked.

Shared by the Trio-native servers and the synchronous helper used by session-scoped fixtures, so
both start the exact same server.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import attrs

#: ``listen`` port meaning "let the server pick a free one" (learned from its ports file).
ANY_PORT = -1
LOOPBACK = "127.0.0.1"


@attrs.frozen
class ClusterSettings:
    """Routes of one node of a loopback cluster; ``route_port`` is this node's own route port."""

    name: str
    route_port: int
    #: The route URLs this node dials (every node's ``route_port``, or proxies in front of them).
    route_ports: tuple[int, ...]
    #: The route port this node tells the others about (None: its own ``route_port``). A test
    #: that puts proxies between the nodes points it at one, so that a route learned by gossip
    #: cannot go around them.
    advertise_port: int | None = None
    #: Keep the other nodes' client URLs out of this node's INFO, so that clients only ever use
    #: the URLs they were given (a test routes them through proxies).
    no_advertise: bool = False


@attrs.frozen
class NodeConfig:
    """What differs between nodes: where they store, which port, how they sync, which cluster."""

    store_dir: Path
    port: int = ANY_PORT
    sync_always: bool = True
    server_name: str | None = None
    cluster: ClusterSettings | None = None
    #: The server's ``max_payload`` (what it announces in INFO); None: its default (1 MiB).
    max_payload_bytes: int | None = None


def _quote(value: str) -> str:
    # JSON string syntax is valid nats-server config string syntax.
    return json.dumps(value)


def render_config(config: NodeConfig) -> str:
    """The text of a nats-server config file for ``config``."""
    lines = [f"listen: {LOOPBACK}:{config.port}"]
    if config.server_name is not None:
        lines.append(f"server_name: {_quote(config.server_name)}")
    if config.max_payload_bytes is not None:
        lines.append(f"max_payload: {config.max_payload_bytes}")
    js = [f"store_dir: {_quote(str(config.store_dir))}"]
    if config.sync_always:
        js.append("sync_interval: always")
    lines.append("jetstream {\n  " + "\n  ".join(js) + "\n}")
    if config.cluster is not None:
        routes = ", ".join(
            _quote(f"nats://{LOOPBACK}:{port}") for port in config.cluster.route_ports
        )
        extra = ""
        if config.cluster.advertise_port is not None:
            extra += f"  advertise: {_quote(f'{LOOPBACK}:{config.cluster.advertise_port}')}\n"
        if config.cluster.no_advertise:
            extra += "  no_advertise: true\n"
        lines.append(
            "cluster {\n"
            f"  name: {_quote(config.cluster.name)}\n"
            f"  listen: {LOOPBACK}:{config.cluster.route_port}\n"
            f"  routes: [{routes}]\n"
            f"{extra}"
            "}"
        )
    return "\n".join(lines) + "\n"


def ports_file(ports_dir: Path, pid: int) -> Path:
    """Where nats-server started with ``--ports_file_dir`` writes its ports."""
    return ports_dir / f"nats-server_{pid}.ports"


def read_client_url(ports_dir: Path, pid: int) -> str | None:
    """The client URL from the ports file, or None while the server has not written it yet."""
    try:
        text = ports_file(ports_dir, pid).read_text()
        urls = json.loads(text)["nats"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not urls:
        return None
    return str(urls[0])


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def free_port() -> int:
    """A loopback port nobody listens on right now (for route ports, which must be known ahead)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_free(port: int) -> bool:
    """True when nothing listens on loopback ``port``. ``SO_REUSEADDR`` as nats-server's own
    listener sets it, so a port left in TIME_WAIT by a server that just stopped counts as free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def command(binary: Path, config_file: Path, ports_dir: Path) -> list[str]:
    return [str(binary), "-c", str(config_file), "--ports_file_dir", str(ports_dir)]


def log_tail(log_file: Path, max_chars: int = 2000) -> str:
    try:
        return log_file.read_text(errors="replace")[-max_chars:]
    except OSError:
        return "(no log)"
