"""The SSRF guard of web_fetch: which addresses a model-chosen URL may reach.

The model picks URLs, and pages pick redirects, so neither may steer the server at its own
network: the guard resolves the host with the event loop's getaddrinfo and refuses the URL
when ANY resolved address is not a public unicast one (loopback, private, link-local, shared,
multicast, reserved, unspecified; IPv4-mapped and 6to4 IPv6 are judged by their IPv4).
The caller then connects to one of the checked addresses, never re-resolving, so a DNS
answer that changes between check and connect (rebinding) cannot slip through.
The operator's allow-list lifts the refusal: a host name (default ports 80 and 443 only) or
`name:port`; an IP or CIDR (every port) or `ip:port`, `[ipv6]:port`, `cidr:port`.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

__all__ = ["AddressGuard", "Refused", "parse_allow_entry"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

DEFAULT_PORTS = frozenset({80, 443})
# Ranges the stdlib (3.11) still calls global but that are no place for a model-chosen URL.
_NOT_PUBLIC: tuple[tuple[str, IPNetwork], ...] = (
    ("IETF protocol-assignment", ipaddress.ip_network("192.0.0.0/24")),
    ("site-local", ipaddress.ip_network("fec0::/10")),
)


def parse_allow_entry(entry: str) -> tuple[str | IPNetwork, int | None]:
    """Split an allow-list entry into (host name or network, port or None); raise ValueError.

    `name`, `name:port`, `ip`, `ip:port`, `cidr`, `cidr:port`, `ipv6`, `[ipv6]:port`.
    """
    text = entry.strip().lower().rstrip(".")
    if not text:
        raise ValueError("allow_hosts entries must not be empty")
    port: int | None = None
    if text.startswith("["):
        inner, _, rest = text[1:].partition("]")
        if rest:
            port = _port(rest.removeprefix(":"), entry)
        text = inner
    elif text.count(":") == 1:
        text, raw_port = text.split(":")
        port = _port(raw_port, entry)
    try:
        return ipaddress.ip_network(text, strict=False), port
    except ValueError:
        if "/" in text or ":" in text or not text:
            raise ValueError(f"{entry!r} is not a valid host, IP or CIDR") from None
        return text, port


def _port(raw: str, entry: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or not 0 < int(raw) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(raw)


class Refused(Exception):
    """The URL may not be fetched; the message says why, in plain words."""


class AddressGuard:
    """Resolve hosts and vet every address against the public-only policy and allow-list."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self._hosts: dict[str, set[int]] = {}  # name -> ports allowed
        self._networks: list[tuple[IPNetwork, int | None]] = []  # None: every port
        for entry in allow:
            target, port = parse_allow_entry(entry)
            if isinstance(target, str):
                ports = {port} if port is not None else set(DEFAULT_PORTS)
                self._hosts.setdefault(target, set()).update(ports)
            else:
                self._networks.append((target, port))

    async def addresses(self, host: str, port: int) -> list[str]:
        """Return the checked addresses to connect to, or raise Refused.

        `host` is the URL's host (an IDNA name or an IP literal, without brackets).
        """
        name = host.lower().rstrip(".")
        literal = _parse_ip(name)
        if literal is not None:
            self._check(literal, name, port)
            return [str(literal)]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                name, port, type=socket.SOCK_STREAM
            )
        except (socket.gaierror, UnicodeError):
            raise Refused(f"the host {host!r} could not be resolved") from None
        found: list[str] = []
        for info in infos:
            ip = _parse_ip(str(info[4][0]))
            if ip is not None and str(ip) not in found:
                found.append(str(ip))
        if not found:
            raise Refused(f"the host {host!r} has no usable address")
        if port not in self._hosts.get(name, ()):
            for text in found:
                ip = ipaddress.ip_address(text)
                self._check(ip, f"{host} ({text})", port)
        # IPv4 first: loopback test servers and many hosts listen on IPv4 only.
        return sorted(found, key=lambda text: ":" in text)

    def _check(self, ip: IPAddress, shown: str, port: int) -> None:
        for net, allowed_port in self._networks:
            if (ip in net or _embedded(ip) in net) and allowed_port in (None, port):
                return
        problem = _problem(ip)
        if problem is not None:
            raise Refused(
                f"{shown} is a {problem} address; only public internet addresses may be "
                "fetched (an operator can allow it in tools.web_fetch.allow_hosts)"
            )


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id
    except ValueError:
        return None


def _embedded(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4), else itself."""
    if isinstance(ip, ipaddress.IPv6Address):
        return ip.ipv4_mapped or ip.sixtofour or ip
    return ip


def _problem(ip: IPAddress) -> str | None:
    """Why the address is not public unicast, or None when it is."""
    ip = _embedded(ip)
    for label, net in _NOT_PUBLIC:
        if ip.version == net.version and ip in net:
            return label
    checks = (
        ("loopback", ip.is_loopback),
        ("link-local", ip.is_link_local),
        ("multicast", ip.is_multicast),
        ("unspecified", ip.is_unspecified),
        ("reserved", ip.is_reserved),
        ("private", ip.is_private),
        ("non-public", not ip.is_global),
    )
    for label, hit in checks:
        if hit:
            return label
    return None
