"""A NIC update as ARM's Network provider carries it out: validated, allocated, all or nothing.

Role: :func:`apply` is the one place where a write changes a NIC's IP configurations, whether the
write is a NIC ``PUT`` or a scale-set VM's model update (Compute applies the model through Network).
:class:`Snapshot` is what a long-running operation that may fail keeps, to undo its change.

The rules (ARM's, as far as the provider depends on them):

* at least one configuration, at most :data:`~eni_ipam_testkit.fake_azure.model.MAX_IP_CONFIGURATIONS`,
  names present and unique (case-insensitively), all in one existing subnet, at most one primary
  (none named: the first is);
* a configuration kept by name in the same subnet keeps its address; every other one gets the
  subnet's lowest free address (dynamic allocation), and the ones left out give theirs back;
* if the subnet cannot hold the new addresses (counting those given back) the update is refused with
  ``400 SubnetIsFull``.

Invariant: :func:`apply` checks everything before it changes anything, so a refusal leaves the NIC
and the subnets as they were.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence

from eni_ipam_testkit.fake_azure.model import (
    MAX_IP_CONFIGURATIONS,
    IpConfig,
    Json,
    Nic,
    Refusal,
    Subnet,
    key,
)


@dataclasses.dataclass
class Snapshot:
    """NICs' configurations and ETags, and every subnet's addresses in use, as they were."""

    nics: list[tuple[Nic, list[IpConfig], str]]
    used: dict[str, dict[str, str]]

    @classmethod
    def take(cls, nics: Sequence[Nic], subnets: Mapping[str, Subnet]) -> Snapshot:
        return cls(
            nics=[(n, copy.deepcopy(n.configs), n.etag) for n in nics],
            used={k: dict(s.used) for k, s in subnets.items()},
        )

    def restore(self, subnets: Mapping[str, Subnet]) -> None:
        for nic, configs, etag in self.nics:
            nic.configs, nic.etag = configs, etag
        for subnet_key, used in self.used.items():
            subnets[subnet_key].used = used


def apply(nic: Nic, wanted: Sequence[Json], subnets: Mapping[str, Subnet]) -> None:
    """Make ``wanted`` (ARM IP configurations) the NIC's configurations, all or nothing.

    Raises:
        Refusal: invalid request, or not enough free addresses (``SubnetIsFull``).
    """
    if not wanted:
        raise Refusal(400, "InvalidRequestFormat", "A network interface needs at least one IP configuration.")
    if len(wanted) > MAX_IP_CONFIGURATIONS:
        raise Refusal(
            400,
            "InvalidRequestFormat",
            f"Network interface {nic.id} has {len(wanted)} IP configurations; at most "
            f"{MAX_IP_CONFIGURATIONS} are allowed.",
        )
    names = [str(c.get("name", "")) for c in wanted]
    if "" in names or len({n.lower() for n in names}) != len(names):
        raise Refusal(400, "InvalidRequestFormat", "IP configuration names must be present and unique.")
    subnet_ids = {key(str(((c.get("properties") or {}).get("subnet") or {}).get("id", ""))) for c in wanted}
    if len(subnet_ids) != 1:
        raise Refusal(
            400,
            "InvalidRequestFormat",
            f"IPConfigurations on a Nic {nic.id} cannot belong to different subnets. Subnets referred: "
            f"{';'.join(sorted(subnet_ids))}",
        )
    subnet_key = subnet_ids.pop()
    subnet = subnets.get(subnet_key)
    if subnet is None:
        raise Refusal(
            400,
            "InvalidResourceReference",
            f"Resource {subnet_key} referenced by {nic.id} was not found.",
        )
    flags = [bool((c.get("properties") or {}).get("primary")) for c in wanted]
    if sum(flags) > 1:
        raise Refusal(400, "InvalidRequestFormat", "Only one IP configuration can be primary.")
    if not any(flags):
        flags[0] = True
    existing = {c.name.lower(): c for c in nic.configs}
    kept = {
        n.lower() for n in names if n.lower() in existing and key(existing[n.lower()].subnet_id) == subnet_key
    }
    new_count = len(names) - len(kept)
    released = [c for c in nic.configs if c.name.lower() not in kept]
    if new_count > subnet.free() + sum(1 for c in released if key(c.subnet_id) == subnet_key):
        raise Refusal(
            400,
            "SubnetIsFull",
            f"Subnet {subnet.name} with address prefix {subnet.network} does not have enough "
            f"capacity for {new_count} IP addresses.",
        )
    for config in released:
        subnets[key(config.subnet_id)].used.pop(config.address, None)
    configs: list[IpConfig] = []
    for name, primary, spec in zip(names, flags, wanted, strict=True):
        groups = tuple(
            str(g["id"]) for g in (spec.get("properties") or {}).get("applicationSecurityGroups") or ()
        )
        if name.lower() in kept:
            old = existing[name.lower()]
            configs.append(IpConfig(old.name, old.subnet_id, old.address, primary, groups))
            continue
        address = subnet.allocate(f"{nic.id}/ipConfigurations/{name}")
        assert address is not None  # capacity was checked above
        configs.append(IpConfig(name, subnet.id, address, primary, groups))
    nic.configs = configs
