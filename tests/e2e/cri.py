"""A small client of the Kubernetes Container Runtime Interface (CRI), for the end-to-end tests: it
drives a runtime's pod sandboxes over the runtime's unix socket the way the kubelet does.

Only the calls the tests make are declared — ``Version``, ``RunPodSandbox``, ``StopPodSandbox``,
``RemovePodSandbox``, ``PodSandboxStatus`` and ``ListPodSandbox`` of ``runtime.v1.RuntimeService`` —
and of their messages only the fields the tests read or write. The field numbers are the CRI API's
published ones (``k8s.io/cri-api``, ``pkg/apis/runtime/v1/api.proto``); a field left out is skipped
by the decoder as protobuf's unknown fields are, so the subset reads every runtime's answers.

The messages are built at import from a ``FileDescriptorProto`` with protobuf's runtime: no code
generated elsewhere is checked in, and no protobuf compiler is needed at test time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE = "runtime.v1"
SERVICE = f"{PACKAGE}.RuntimeService"

_F = descriptor_pb2.FieldDescriptorProto
STRING, UINT32, INT64, BOOL, MESSAGE, ENUM = (
    _F.TYPE_STRING,
    _F.TYPE_UINT32,
    _F.TYPE_INT64,
    _F.TYPE_BOOL,
    _F.TYPE_MESSAGE,
    _F.TYPE_ENUM,
)
REPEATED = object()
"""A marker in :data:`MESSAGES`: the field is repeated."""

MESSAGES: dict[str, list[tuple[str, int, int, str | None] | tuple[str, int, int, str | None, object]]] = {
    # name: [(field, number, type, message or enum type), ...]
    "VersionRequest": [("version", 1, STRING, None)],
    "VersionResponse": [
        ("version", 1, STRING, None),
        ("runtime_name", 2, STRING, None),
        ("runtime_version", 3, STRING, None),
        ("runtime_api_version", 4, STRING, None),
    ],
    "PodSandboxMetadata": [
        ("name", 1, STRING, None),
        ("uid", 2, STRING, None),
        ("namespace", 3, STRING, None),
        ("attempt", 4, UINT32, None),
    ],
    "PodSandboxConfig": [
        ("metadata", 1, MESSAGE, "PodSandboxMetadata"),
        ("hostname", 2, STRING, None),
        ("log_directory", 3, STRING, None),
        ("labels", 6, MESSAGE, "PodSandboxConfig.LabelsEntry", REPEATED),
    ],
    "PodSandboxConfig.LabelsEntry": [("key", 1, STRING, None), ("value", 2, STRING, None)],
    "RunPodSandboxRequest": [
        ("config", 1, MESSAGE, "PodSandboxConfig"),
        ("runtime_handler", 2, STRING, None),
    ],
    "RunPodSandboxResponse": [("pod_sandbox_id", 1, STRING, None)],
    "StopPodSandboxRequest": [("pod_sandbox_id", 1, STRING, None)],
    "StopPodSandboxResponse": [],
    "RemovePodSandboxRequest": [("pod_sandbox_id", 1, STRING, None)],
    "RemovePodSandboxResponse": [],
    "PodSandboxStatusRequest": [("pod_sandbox_id", 1, STRING, None), ("verbose", 2, BOOL, None)],
    "PodIP": [("ip", 1, STRING, None)],
    "PodSandboxNetworkStatus": [
        ("ip", 1, STRING, None),
        ("additional_ips", 2, MESSAGE, "PodIP", REPEATED),
    ],
    "PodSandboxStatus": [
        ("id", 1, STRING, None),
        ("metadata", 2, MESSAGE, "PodSandboxMetadata"),
        ("state", 3, ENUM, "PodSandboxState"),
        ("created_at", 4, INT64, None),
        ("network", 5, MESSAGE, "PodSandboxNetworkStatus"),
    ],
    "PodSandboxStatusResponse": [
        ("status", 1, MESSAGE, "PodSandboxStatus"),
        ("info", 2, MESSAGE, "PodSandboxStatusResponse.InfoEntry", REPEATED),
    ],
    "PodSandboxStatusResponse.InfoEntry": [("key", 1, STRING, None), ("value", 2, STRING, None)],
    "PodSandboxStateValue": [("state", 1, ENUM, "PodSandboxState")],
    "PodSandboxFilter": [("id", 1, STRING, None), ("state", 2, MESSAGE, "PodSandboxStateValue")],
    "ListPodSandboxRequest": [("filter", 1, MESSAGE, "PodSandboxFilter")],
    "PodSandbox": [
        ("id", 1, STRING, None),
        ("metadata", 2, MESSAGE, "PodSandboxMetadata"),
        ("state", 3, ENUM, "PodSandboxState"),
    ],
    "ListPodSandboxResponse": [("items", 1, MESSAGE, "PodSandbox", REPEATED)],
}
ENUMS = {"PodSandboxState": [("SANDBOX_READY", 0), ("SANDBOX_NOTREADY", 1)]}
SANDBOX_READY, SANDBOX_NOTREADY = 0, 1


def _file() -> descriptor_pb2.FileDescriptorProto:
    """The subset of the CRI API's api.proto, as a descriptor (nested map entries included)."""
    proto = descriptor_pb2.FileDescriptorProto(name="eni_ipam_e2e/cri_subset.proto", package=PACKAGE)
    proto.syntax = "proto3"
    for name, values in ENUMS.items():
        enum = proto.enum_type.add(name=name)
        for value_name, number in values:
            enum.value.add(name=value_name, number=number)
    messages: dict[str, descriptor_pb2.DescriptorProto] = {}
    for name in sorted(MESSAGES, key=lambda n: n.count(".")):  # parents before their map entries
        parent, _, own = name.rpartition(".")
        message = messages[parent].nested_type.add(name=own) if parent else proto.message_type.add(name=name)
        if own.endswith("Entry") and parent:
            message.options.map_entry = True
        messages[name] = message
        for field in MESSAGES[name]:
            field_name, number, kind, type_name = field[:4]
            label = _F.LABEL_REPEATED if field[4:] == (REPEATED,) else _F.LABEL_OPTIONAL
            added = message.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name is not None:
                added.type_name = f".{PACKAGE}.{type_name}"
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())


def message(name: str) -> Any:
    """The message class ``runtime.v1.<name>``."""
    return message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{PACKAGE}.{name}"))


@dataclass(frozen=True)
class Sandbox:
    """What ``PodSandboxStatus`` says of a pod sandbox."""

    id: str
    ready: bool
    ip: str
    additional_ips: tuple[str, ...]
    netns: str
    """The sandbox's network namespace (the runtime's verbose ``info``), empty when not reported."""
    pid: int = 0
    """The sandbox's process (the runtime's verbose ``info``), 0 when not reported: its
    ``/proc/<pid>/ns/net`` is the pod's network namespace from any mount namespace."""


class RuntimeService:
    """``runtime.v1.RuntimeService`` on a unix socket; each call raises :class:`grpc.RpcError` on error."""

    def __init__(self, socket: str, *, timeout: float = 60.0) -> None:
        self.channel = grpc.insecure_channel(f"unix://{socket}")
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: str, request: Any, response: str, timeout: float | None) -> Any:
        stub = self.channel.unary_unary(
            f"/{SERVICE}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message(response).FromString,
        )
        return stub(request, timeout=timeout or self.timeout)

    def version(self, *, timeout: float | None = None) -> dict[str, str]:
        answer = self._call("Version", message("VersionRequest")(version="v1"), "VersionResponse", timeout)
        return {
            "runtime_name": answer.runtime_name,
            "runtime_version": answer.runtime_version,
            "runtime_api_version": answer.runtime_api_version,
        }

    def run_pod_sandbox(
        self,
        *,
        name: str,
        uid: str,
        namespace: str = "default",
        attempt: int = 0,
        labels: Mapping[str, str] | None = None,
        log_directory: str = "",
        timeout: float | None = None,
    ) -> str:
        """A new pod sandbox, as the kubelet asks for one (its id)."""
        metadata = message("PodSandboxMetadata")(name=name, uid=uid, namespace=namespace, attempt=attempt)
        config = message("PodSandboxConfig")(
            metadata=metadata, hostname=name, log_directory=log_directory, labels=dict(labels or {})
        )
        request = message("RunPodSandboxRequest")(config=config)
        answer = self._call("RunPodSandbox", request, "RunPodSandboxResponse", timeout)
        sandbox_id: str = answer.pod_sandbox_id
        return sandbox_id

    def stop_pod_sandbox(self, sandbox_id: str, *, timeout: float | None = None) -> None:
        request = message("StopPodSandboxRequest")(pod_sandbox_id=sandbox_id)
        self._call("StopPodSandbox", request, "StopPodSandboxResponse", timeout)

    def remove_pod_sandbox(self, sandbox_id: str, *, timeout: float | None = None) -> None:
        request = message("RemovePodSandboxRequest")(pod_sandbox_id=sandbox_id)
        self._call("RemovePodSandbox", request, "RemovePodSandboxResponse", timeout)

    def pod_sandbox_status(self, sandbox_id: str, *, timeout: float | None = None) -> Sandbox:
        request = message("PodSandboxStatusRequest")(pod_sandbox_id=sandbox_id, verbose=True)
        answer = self._call("PodSandboxStatus", request, "PodSandboxStatusResponse", timeout)
        status = answer.status
        return Sandbox(
            id=status.id,
            ready=status.state == SANDBOX_READY,
            ip=status.network.ip,
            additional_ips=tuple(p.ip for p in status.network.additional_ips),
            netns=_netns(answer.info),
            pid=_pid(answer.info),
        )

    def list_pod_sandbox(self, *, ready_only: bool = False, timeout: float | None = None) -> dict[str, bool]:
        """Every pod sandbox the runtime knows: id → whether it is ready."""
        request = message("ListPodSandboxRequest")()
        if ready_only:
            request.filter.state.state = SANDBOX_READY
        answer = self._call("ListPodSandbox", request, "ListPodSandboxResponse", timeout)
        return {item.id: item.state == SANDBOX_READY for item in answer.items}


def _pid(info: Mapping[str, str]) -> int:
    """The sandbox's process id in a verbose ``PodSandboxStatus``'s ``info`` (containerd's
    ``{"info": {"pid": ...}}``), 0 when absent."""
    import json

    try:
        pid = json.loads(info.get("info", "{}")).get("pid", 0)
    except (ValueError, AttributeError):
        return 0
    return pid if isinstance(pid, int) else 0


def _netns(info: Mapping[str, str]) -> str:
    """The network namespace path in a verbose ``PodSandboxStatus``'s ``info`` (containerd's
    ``{"info": {"runtimeSpec": {"linux": {"namespaces": [{"type": "network", "path": ...}]}}}}``)."""
    import json

    try:
        verbose = json.loads(info.get("info", "{}"))
        namespaces = verbose["runtimeSpec"]["linux"]["namespaces"]
    except (ValueError, KeyError, TypeError):
        return ""
    for namespace in namespaces:
        if isinstance(namespace, dict) and namespace.get("type") == "network":
            return str(namespace.get("path", ""))
    return ""
