"""libnetwork's IPAM vocabulary, shared by the driver, its registry and its HTTP adapter.

The address spaces this driver serves, the option keys it reads, libnetwork's well-known error messages
(its ``ipamapi`` package, verbatim: Docker shows them to users and compares some of them), and
:class:`IpamRequestError`, the refusal that carries one of them with its HTTP status.
"""

from __future__ import annotations

from eni_ipam.errors import EniIpamError

LOCAL_ADDRESS_SPACE = "eni-ipam-local"
GLOBAL_ADDRESS_SPACE = "eni-ipam-global"
ADDRESS_SPACES = (LOCAL_ADDRESS_SPACE, GLOBAL_ADDRESS_SPACE)
REQUEST_ADDRESS_TYPE = "RequestAddressType"
"""Option key of RequestAddress saying what the address is for."""
GATEWAY = "com.docker.network.gateway"
"""The RequestAddressType of a gateway, and the RequestPool Data key carrying the gateway."""
SERIAL = "com.docker.network.ipam.serial"
"""Option: ``"true"`` hands out the first free address after the last one (not the lowest free)."""

ERR_INVALID_ADDRESS_SPACE = "invalid address space"
ERR_INVALID_POOL = "invalid address pool"
ERR_INVALID_SUBPOOL = "invalid address subpool"
ERR_NO_AVAILABLE_IPS = "no available addresses on this pool"
ERR_NO_IP_RETURNED = "no address returned"
ERR_IP_ALREADY_ALLOCATED = "Address already in use"
ERR_IP_OUT_OF_RANGE = "requested address is out of range"
ERR_POOL_OVERLAP = "Pool overlaps with other one on this address space"
ERR_BAD_POOL = "address space does not contain specified address pool"


class IpamRequestError(EniIpamError):
    """The driver refused a request. ``message`` is libnetwork's ``Err``; ``status`` the HTTP status
    (400 invalid parameter, 403 forbidden, 503 unavailable, 500 the driver failed)."""

    def __init__(self, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def invalid(message: str) -> IpamRequestError:
    return IpamRequestError(message, status=400)


def forbidden(message: str) -> IpamRequestError:
    return IpamRequestError(message, status=403)


def unavailable(message: str) -> IpamRequestError:
    return IpamRequestError(message, status=503)
