"""The SSRF guard of web_fetch: which addresses a model-chosen URL may reach.

The model picks URLs, and pages pick redirects, so neither may steer the server at its own
network: the guard resolves the host with the event loop's getaddrinfo and refuses the URL
when ANY resolved address is not a public unicast one (loopback, private, link-local, shared,
multicast, reserved, unspecified; IPv4-mapped and 6to4 IPv6 are judged by their IPv4).
The caller then connects to one of the checked addresses, never re-resolving, so a DNS
answer that changes between check and connect (rebinding) cannot slip through.
The operator's allow-list (host names, or IPs/CIDRs) lifts the refusal.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

__all__ = ["AddressGuard", "Refused"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class Refused(Exception):
    """The URL may not be fetched; the message says why, in plain words."""


class AddressGuard:
    """Resolve hosts and vet every address against the public-only policy and allow-list."""

    def __init__(self, allow: Iterable[str] = ()) -> None:
        self._hosts: set[str] = set()
        self._networks: list[IPNetwork] = []
        for entry in allow:
            try:
                self._networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self._hosts.add(entry.lower().rstrip("."))

    async def addresses(self, host: str, port: int) -> list[str]:
        """Return the checked addresses to connect to, or raise Refused.

        `host` is the URL's host (an IDNA name or an IP literal, without brackets).
        """
        name = host.lower().rstrip(".")
        literal = _parse_ip(name)
        if literal is not None:
            self._check(literal, name)
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
        if name not in self._hosts:
            for text in found:
                ip = ipaddress.ip_address(text)
                self._check(ip, f"{host} ({text})")
        # IPv4 first: loopback test servers and many hosts listen on IPv4 only.
        return sorted(found, key=lambda text: ":" in text)

    def _check(self, ip: IPAddress, shown: str) -> None:
        if any(ip in net or _embedded(ip) in net for net in self._networks):
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
