"""Micro-benchmark: EC2's two heavy listings read by botocore and by the listing parser
(providers/aws/listings.py, decision 0020).

The pages are written here, as EC2 writes them: the elements, their order and their content of
EC2's answers (``privateDnsName`` for every address, ``groupSet``, ``tagSet``, ``attachment``…), one
element a line, unindented (EC2 indents, which only adds bytes): about 3 KB an interface with ten
secondaries. A ``DescribeNetworkInterfaces`` page holds ``interfaces`` interfaces; the
``DescribeInstances`` page is as heavy: ``interfaces / 4`` instances, each nesting its four
interfaces with their addresses, one instance a reservation.

Both readers get the same bytes, as botocore hands them to its parser:

* **botocore**: the real ``EC2QueryParser``, then :func:`~providers.aws.api.parse_interface` (or
  :func:`~providers.aws.api.parse_instance`) over its dicts: what the provider cost before;
* **cold**: the listing parser with nothing cached (no reuse cache, the tables of shared strings,
  tag maps and group tuples emptied);
* **warm**: the same page again with the reuse cache of the previous full listing, every interface
  unchanged (a steady cluster).

Times are CPU time of the parsing thread, best of ``repeat`` runs taken in turns; the results are
checked equal (the benchmark fails otherwise). A resync at 100,000 nodes is both listings of 400,000
interfaces, at this machine's speed and at the speed the targets were set on (botocore 87 s a
listing). The GIL, while a worker thread parses pages and an event loop ticks every millisecond:

* **slice**: the longest the loop waited with a switch interval of 0.1 ms and the collector off,
  that is the longest stretch that could not be interrupted (one C call);
* **stall**: the longest it waited at the default switch interval (5 ms) with the collector on, as
  the provider's event loop would.

``python -m bench.ec2_parse [interfaces] [addresses]`` prints the figures. Not part of ``make bench``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import sys
import time
from collections.abc import Callable
from typing import Any

import botocore.parsers
import botocore.session

from providers.aws import listings
from providers.aws.api import parse_instance, parse_interface

REGION = "us-east-1"
PER_INSTANCE = 4
"""Interfaces of each instance (device indexes 0 to 3): a node of a typical size."""
RESYNC_INTERFACES = 400_000
"""Interfaces a resync reads at 100,000 nodes (four each), in each of the two listings."""
DNI = "DescribeNetworkInterfaces"
DI = "DescribeInstances"
REFERENCE_BOTOCORE_S = 87.0
"""botocore's CPU for one listing of 400,000 interfaces on the machine the targets were set on
(217 ms a page of 1,000)."""
TARGET_SPEEDUP = 6.0
TARGET_RESYNC_CPU = 15.0
TARGET_STALL_MS = 10.0

_NS = "http://ec2.amazonaws.com/doc/2016-11-15/"


# -- EC2's pages ------------------------------------------------------------------------------------


def _ip(n: int) -> str:
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def _dns(address: str) -> str:
    return f"ip-{address.replace('.', '-')}.ec2.internal"


def _instance_id(n: int) -> str:
    return f"i-{0x0A1B2C3D4E5F60000 + n:017x}"


def _interface_lines(n: int, addresses: int, *, nested: bool) -> list[str]:
    """Interface ``n`` (device index ``n % 4`` of instance ``n // 4``) with ``addresses``
    secondaries. ``nested``: as ``DescribeInstances`` nests it (no zone, tags or owner)."""
    first = 0x000400 + n * 32
    primary = _ip(first)
    instance = _instance_id(n // PER_INSTANCE)
    device = n % PER_INSTANCE
    subnet = f"subnet-{0x0C0FFEE0000000000 + n // 4000 % 6:017x}"
    lines = [
        "<item>",
        f"<networkInterfaceId>eni-{0x0F00000000000000 + n:017x}</networkInterfaceId>",
        f"<subnetId>{subnet}</subnetId>",
        "<vpcId>vpc-0123456789abcdef0</vpcId>",
    ]
    if not nested:
        lines.append(f"<availabilityZone>{REGION}a</availabilityZone>")
    lines += [
        "<description/>" if device == 0 else f"<description>eni-ipam ({instance})</description>",
        "<ownerId>111122223333</ownerId>",
    ]
    if not nested:
        lines.append("<requesterManaged>false</requesterManaged>")
    lines += [
        "<status>in-use</status>",
        f"<macAddress>0e:4f:{n >> 16 & 255:02x}:{n >> 8 & 255:02x}:{n & 255:02x}:7b</macAddress>",
        f"<privateIpAddress>{primary}</privateIpAddress>",
        f"<privateDnsName>{_dns(primary)}</privateDnsName>",
        "<sourceDestCheck>true</sourceDestCheck>",
        "<groupSet>",
        "<item>",
        "<groupId>sg-0a1b2c3d4e5f60718</groupId>",
        "<groupName>eks-cluster-sg-prod-1234567890</groupName>",
        "</item>",
        "</groupSet>",
        "<attachment>",
        f"<attachmentId>eni-attach-{0x0A00000000000000 + n:017x}</attachmentId>",
    ]
    if not nested:
        lines += [f"<instanceId>{instance}</instanceId>", "<instanceOwnerId>111122223333</instanceOwnerId>"]
    lines += [
        f"<deviceIndex>{device}</deviceIndex>",
        "<networkCardIndex>0</networkCardIndex>",
        "<status>attached</status>",
        "<attachTime>2026-11-02T09:14:27.000Z</attachTime>",
        "<deleteOnTermination>true</deleteOnTermination>",
        "</attachment>",
    ]
    if not nested:
        if device == 0:
            lines.append("<tagSet/>")
        else:
            lines.append("<tagSet>")
            for key, value in (
                ("eni-ipam/cluster", "prod"),
                ("eni-ipam/managed-by", "eni-ipam"),
                ("eni-ipam/node", f"node-{n // PER_INSTANCE}"),
                ("eni-ipam/instance", instance),
            ):
                lines += ["<item>", f"<key>{key}</key>", f"<value>{value}</value>", "</item>"]
            lines.append("</tagSet>")
    lines.append("<privateIpAddressesSet>")
    for k in range(addresses + 1):
        address = _ip(first + k)
        lines += [
            "<item>",
            f"<privateIpAddress>{address}</privateIpAddress>",
            f"<privateDnsName>{_dns(address)}</privateDnsName>",
            f"<primary>{'true' if k == 0 else 'false'}</primary>",
            "</item>",
        ]
    lines += [
        "</privateIpAddressesSet>",
        "<ipv6AddressesSet/>",
        "<interfaceType>interface</interfaceType>",
        "</item>",
    ]
    return lines


def _document(root: str, listing: str, items: list[str], token: str) -> bytes:
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<{root} xmlns="{_NS}">',
        "<requestId>59dbff89-35bd-4eac-99ed-be587EXAMPLE</requestId>",
        f"<{listing}>",
        *items,
        f"</{listing}>",
    ]
    if token:
        lines.append(f"<nextToken>{token}</nextToken>")
    lines.append(f"</{root}>")
    return "\n".join(lines).encode()


def interfaces_page(interfaces: int = 1000, addresses: int = 10, *, token: str = "eyJ2IjoiMiJ9") -> bytes:
    """A ``DescribeNetworkInterfaces`` page as EC2 writes it."""
    items = ["\n".join(_interface_lines(n, addresses, nested=False)) for n in range(interfaces)]
    return _document("DescribeNetworkInterfacesResponse", "networkInterfaceSet", items, token)


def instances_page(interfaces: int = 1000, addresses: int = 10, *, token: str = "eyJ2IjoiMiJ9") -> bytes:
    """A ``DescribeInstances`` page as EC2 writes it: ``interfaces / 4`` instances, each nesting its
    interfaces (and their addresses), one instance a reservation."""
    items = []
    for i in range(max(interfaces // PER_INSTANCE, 1)):
        primary = _ip(0x000400 + i * PER_INSTANCE * 32)
        nested = "\n".join(
            "\n".join(_interface_lines(i * PER_INSTANCE + d, addresses, nested=True))
            for d in range(PER_INSTANCE)
        )
        subnet = f"subnet-{0x0C0FFEE0000000000 + i * PER_INSTANCE // 4000 % 6:017x}"
        instance = f"""<item>
<reservationId>r-{0x0B00000000000000 + i:017x}</reservationId>
<ownerId>111122223333</ownerId>
<requesterId>940372691376</requesterId>
<groupSet/>
<instancesSet>
<item>
<instanceId>{_instance_id(i)}</instanceId>
<imageId>ami-0abcdef1234567890</imageId>
<instanceState>
<code>16</code>
<name>running</name>
</instanceState>
<privateDnsName>{_dns(primary)}</privateDnsName>
<dnsName/>
<reason/>
<amiLaunchIndex>0</amiLaunchIndex>
<productCodes/>
<instanceType>m5.4xlarge</instanceType>
<launchTime>2026-11-02T09:14:20.000Z</launchTime>
<placement>
<availabilityZone>{REGION}a</availabilityZone>
<groupName/>
<tenancy>default</tenancy>
</placement>
<monitoring>
<state>disabled</state>
</monitoring>
<subnetId>{subnet}</subnetId>
<vpcId>vpc-0123456789abcdef0</vpcId>
<privateIpAddress>{primary}</privateIpAddress>
<sourceDestCheck>true</sourceDestCheck>
<groupSet>
<item>
<groupId>sg-0a1b2c3d4e5f60718</groupId>
<groupName>eks-cluster-sg-prod-1234567890</groupName>
</item>
</groupSet>
<architecture>x86_64</architecture>
<rootDeviceType>ebs</rootDeviceType>
<rootDeviceName>/dev/xvda</rootDeviceName>
<blockDeviceMapping>
<item>
<deviceName>/dev/xvda</deviceName>
<ebs>
<volumeId>vol-{0x0D00000000000000 + i:017x}</volumeId>
<status>attached</status>
<attachTime>2026-11-02T09:14:21.000Z</attachTime>
<deleteOnTermination>true</deleteOnTermination>
</ebs>
</item>
</blockDeviceMapping>
<virtualizationType>hvm</virtualizationType>
<clientToken>fleet-{0x0E00000000000000 + i:017x}</clientToken>
<tagSet>
<item>
<key>Name</key>
<value>node-{i}</value>
</item>
<item>
<key>kubernetes.io/cluster/prod</key>
<value>owned</value>
</item>
</tagSet>
<hypervisor>xen</hypervisor>
<networkInterfaceSet>
{nested}
</networkInterfaceSet>
<iamInstanceProfile>
<arn>arn:aws:iam::111122223333:instance-profile/eks-node</arn>
<id>AIPAEXAMPLEEXAMPLE1234</id>
</iamInstanceProfile>
<ebsOptimized>true</ebsOptimized>
<enaSupport>true</enaSupport>
<cpuOptions>
<coreCount>8</coreCount>
<threadsPerCore>2</threadsPerCore>
</cpuOptions>
<capacityReservationSpecification>
<capacityReservationPreference>open</capacityReservationPreference>
</capacityReservationSpecification>
<hibernationOptions>
<configured>false</configured>
</hibernationOptions>
<metadataOptions>
<state>applied</state>
<httpTokens>required</httpTokens>
<httpPutResponseHopLimit>2</httpPutResponseHopLimit>
<httpEndpoint>enabled</httpEndpoint>
</metadataOptions>
<enclaveOptions>
<enabled>false</enabled>
</enclaveOptions>
<platformDetails>Linux/UNIX</platformDetails>
<usageOperation>RunInstances</usageOperation>
<privateDnsNameOptions>
<hostnameType>ip-name</hostnameType>
<enableResourceNameDnsARecord>false</enableResourceNameDnsARecord>
</privateDnsNameOptions>
<maintenanceOptions>
<autoRecovery>default</autoRecovery>
</maintenanceOptions>
</item>
</instancesSet>
</item>"""
        items.append(instance)
    return _document("DescribeInstancesResponse", "reservationSet", items, token)


# -- the two readers ----------------------------------------------------------------------------------

_SHAPES: dict[str, Any] = {}


def _shape(operation: str) -> Any:
    if not _SHAPES:
        model = botocore.session.get_session().get_service_model("ec2")
        for name in ("DescribeNetworkInterfaces", "DescribeInstances"):
            _SHAPES[name] = model.operation_model(name).output_shape
    return _SHAPES[operation]


def _response(body: bytes, operation: str) -> dict[str, Any]:
    return {"body": body, "headers": {}, "status_code": 200, "context": {"operation_name": operation}}


def botocore_reads(body: bytes, operation: str) -> list[Any]:
    """botocore's parser, then the provider's dict readers (the provider before the listing parser)."""
    parsed = botocore.parsers.EC2QueryParser().parse(_response(body, operation), _shape(operation))
    if operation == "DescribeNetworkInterfaces":
        return [parse_interface(d) for d in parsed["NetworkInterfaces"]]
    return [parse_instance(i) for r in parsed["Reservations"] for i in r.get("Instances") or ()]


def fast_reads(body: bytes, operation: str, cache: listings.ReuseCache | None = None) -> list[Any]:
    """The listing parser, as the client's worker thread runs it."""
    parser = listings.ListingParserFactory().create_parser("ec2")
    listing = listings.Listing(cache, full=True)
    with listings.model_answers(listing):
        parsed = parser.parse(_response(body, operation), _shape(operation))
    listing.finish()
    return list(parsed[listings.MODEL_KEY])


def _cpu_ms(
    readers: dict[str, tuple[Callable[[], object], Callable[[], object]]], repeat: int
) -> dict[str, float]:
    """Best CPU time of each reader in this thread, in ms; ``before`` runs untimed before each run.

    The readers take turns, run after run, so that a machine slowing down or speeding up (other
    processes, other virtual machines, frequency scaling) weighs on each alike: the ratios hold
    even where the absolute figures drift.
    """
    best = dict.fromkeys(readers, float("inf"))
    for _ in range(repeat):
        for name, (work, before) in readers.items():
            before()
            started = time.thread_time()
            work()
            best[name] = min(best[name], time.thread_time() - started)
    return {name: seconds * 1e3 for name, seconds in best.items()}


# -- the GIL ----------------------------------------------------------------------------------------


def loop_stall_ms(
    work: Callable[[], object], *, interval: float | None = None, collect: bool = True
) -> float:
    """The longest an asyncio event loop waited past a 1 ms timer while a worker thread ran ``work``
    (the provider's situation), in ms.

    ``interval``: the interpreter's switch interval during the run (``None``: the default, 5 ms). A
    thread running Python code gives the GIL up within an interval, so with a tiny one the stall is
    the longest slice that could not be interrupted: one C call, or one garbage collection
    (``collect=False`` keeps the collector out of the figure).
    """

    async def probe() -> float:
        loop = asyncio.get_running_loop()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            late = 0.0
            due = time.perf_counter() + 0.001  # before the work starts: it may take the GIL at once
            task = loop.run_in_executor(pool, work)
            while not task.done():
                await asyncio.sleep(max(due - time.perf_counter(), 0.0))
                # The next tick is due 1 ms after this one: a stall anywhere after this line (in a
                # timer wait, or between two lines of this loop) shows as the next tick's lateness.
                now = time.perf_counter()
                late = max(late, now - due)
                due = now + 0.001
            await task
        return late * 1e3

    previous = sys.getswitchinterval()
    gc.collect()
    if not collect:
        gc.disable()
    if interval is not None:
        sys.setswitchinterval(interval)
    try:
        return asyncio.run(probe())
    finally:
        sys.setswitchinterval(previous)
        gc.enable()


def _least(runs: int, figure: Callable[[], float]) -> float:
    """The least of ``runs`` figures: other processes on the machine only ever add to a stall."""
    return min(figure() for _ in range(runs))


# -- the measurement ------------------------------------------------------------------------------


def measure(interfaces: int = 1000, addresses: int = 10, *, repeat: int = 7) -> dict[str, float]:
    """ms per page for botocore's reading and the listing parser's (cold and warm), for both
    listings, the longest GIL slice and event-loop stall of each, and what a resync at 100,000 nodes
    costs.

    Raises:
        AssertionError: the listing parser read a page otherwise than botocore.
    """
    pages = {DNI: interfaces_page(interfaces, addresses), DI: instances_page(interfaces, addresses)}
    for operation, body in pages.items():
        if fast_reads(body, operation) != botocore_reads(body, operation):
            raise AssertionError(f"the listing parser and botocore read the {operation} page differently")

    out: dict[str, float] = {
        "interfaces": interfaces,
        "addresses": addresses,
        "dni_kb_per_interface": len(pages[DNI]) / max(interfaces, 1) / 1024,
        "dni_page_mb": len(pages[DNI]) / 2**20,
        "di_page_mb": len(pages[DI]) / 2**20,
    }
    for operation, key in ((DNI, "dni"), (DI, "di")):
        body = pages[operation]
        warm = listings.ReuseCache()
        fast_reads(body, operation, warm)  # the previous full listing: every item unchanged since
        readers: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {
            "botocore": (functools.partial(botocore_reads, body, operation), _nothing),
            "cold": (functools.partial(fast_reads, body, operation), listings.forget_shared),
            "warm": (functools.partial(fast_reads, body, operation, warm), _nothing),
        }
        for name, ms in _cpu_ms(readers, repeat).items():
            out[f"{key}_{name}_ms"] = ms
        for name in ("cold", "warm"):
            out[f"{key}_speedup_{name}"] = out[f"{key}_botocore_ms"] / out[f"{key}_{name}_ms"]

        def botocore_page(body: bytes = body, operation: str = operation) -> object:
            return botocore_reads(body, operation)

        def fast_pages(body: bytes = body, operation: str = operation) -> object:
            return [fast_reads(body, operation) for _ in range(3)]

        for name, work in (("botocore", botocore_page), ("ours", fast_pages)):
            out[f"{key}_slice_{name}_ms"] = _least(5, functools.partial(_slice, work))
            out[f"{key}_stall_{name}_ms"] = _least(5, functools.partial(loop_stall_ms, work))

    # A resync at 100,000 nodes reads 400,000 interfaces in each listing (DescribeInstances: 100
    # pages of 1,000 instances, the bytes of 400 of these pages).
    pages_per_resync = RESYNC_INTERFACES / max(interfaces, 1)
    for name in ("botocore", "cold", "warm"):
        out[f"resync_{name}_s"] = (out[f"dni_{name}_ms"] + out[f"di_{name}_ms"]) * pages_per_resync / 1000
        # The same resync where botocore reads each listing in REFERENCE_BOTOCORE_S (a machine of
        # the speed the targets were set on): this machine's speed-ups, applied to that.
        if name != "botocore":
            out[f"resync_{name}_reference_s"] = sum(
                REFERENCE_BOTOCORE_S / out[f"{key}_speedup_{name}"] for key in ("dni", "di")
            )
    return out


def _nothing() -> None:
    pass


def _slice(work: Callable[[], object]) -> float:
    return loop_stall_ms(work, interval=1e-4, collect=False)


def render(figures: dict[str, float]) -> str:
    f = figures
    rows = (("DescribeNetworkInterfaces", "dni"), ("DescribeInstances", "di"))
    lines = [
        f"EC2 listings: {int(f['interfaces'])} interfaces a page, {int(f['addresses'])} secondaries each",
        f"  DescribeNetworkInterfaces page {f['dni_page_mb']:.2f} MB ({f['dni_kb_per_interface']:.2f} KB an "
        f"interface), DescribeInstances page {f['di_page_mb']:.2f} MB",
        "",
        f"  {'ms per page (CPU)':<28}{'botocore':>10}{'cold':>8}{'warm':>8}{'cold ×':>9}{'warm ×':>9}",
        *(
            f"  {label:<28}{f[key + '_botocore_ms']:>10.1f}{f[key + '_cold_ms']:>8.1f}"
            f"{f[key + '_warm_ms']:>8.1f}{f[key + '_speedup_cold']:>9.1f}{f[key + '_speedup_warm']:>9.1f}"
            for label, key in rows
        ),
        "",
        "  a resync at 100,000 nodes (both listings, 400,000 interfaces each), CPU:",
        f"    here: botocore {f['resync_botocore_s']:.1f} s, cold {f['resync_cold_s']:.1f} s, "
        f"warm {f['resync_warm_s']:.1f} s",
        f"    where botocore takes {REFERENCE_BOTOCORE_S:.0f} s a listing: cold "
        f"{f['resync_cold_reference_s']:.1f} s, warm {f['resync_warm_reference_s']:.1f} s",
        "",
        f"  {'GIL (ms)':<28}{'slice':>10}{'':>10}{'stall':>10}",
        f"  {'':<28}{'botocore':>10}{'ours':>10}{'botocore':>10}{'ours':>10}",
        *(
            f"  {label:<28}{f[key + '_slice_botocore_ms']:>10.1f}{f[key + '_slice_ours_ms']:>10.2f}"
            f"{f[key + '_stall_botocore_ms']:>10.1f}{f[key + '_stall_ours_ms']:>10.1f}"
            for label, key in rows
        ),
        "  slice: the longest uninterrupted hold (switch interval 0.1 ms, no garbage collection);",
        "  stall: how late a 1 ms timer of the event loop came at worst (5 ms interval, collector on).",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    interfaces = int(argv[0]) if argv else 1000
    addresses = int(argv[1]) if len(argv) > 1 else 10
    figures = measure(interfaces, addresses)
    print(render(figures))
    met = (
        min(figures["dni_speedup_cold"], figures["di_speedup_cold"]) >= TARGET_SPEEDUP
        and figures["resync_cold_reference_s"] <= TARGET_RESYNC_CPU
        and max(figures["dni_stall_ours_ms"], figures["di_stall_ours_ms"]) <= TARGET_STALL_MS
    )
    print(
        f"\n  targets (≥ {TARGET_SPEEDUP:.0f}× cold, resync ≤ {TARGET_RESYNC_CPU:.0f} s, stall ≤ "
        f"{TARGET_STALL_MS:.0f} ms): {'met' if met else 'MISSED'}"
    )
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
