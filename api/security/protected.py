"""Protected mode (as Redis has it): a listener bound to an address other hosts can reach, with no
authentication configured, is refused unless the operator asked for it with `--allow-anonymous`."""

from __future__ import annotations

import ipaddress
import socket


class ProtectedModeError(ValueError):
    pass


def is_loopback(host: str) -> bool:
    """Whether binding `host` only accepts connections from this machine. An empty host or a wildcard binds every
    interface; a name counts as loopback only when every address it resolves to is."""
    host = host.strip().strip("[]")
    if host in ("", "*", "0.0.0.0", "::"):
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_protected_mode(listener: str, host: str, authenticated: bool, allow_anonymous: bool) -> bool:
    """Raises ProtectedModeError (one line, saying what to do) for an anonymous listener on a reachable address;
    returns whether the listener runs anonymous (the caller logs a warning then)."""
    if authenticated:
        return False
    if not allow_anonymous and not is_loopback(host):
        raise ProtectedModeError(
            f"refusing to serve {listener} on {host or '*'} with no authentication: anyone who reaches the port "
            "could read, produce and administer. Configure tokens (MQINDEX_TOKENS='TOKEN=read,produce,admin' or "
            "`tokens` in the config file), bind 127.0.0.1, or pass --allow-anonymous")
    return True
