"""EC2's Query protocol on the way in: one form-encoded request, read as botocore writes it.

botocore's ``ec2`` serializer sends ``Action=…&Version=2016-11-15`` and flattens every parameter
into numbered keys: a list member is ``NetworkInterfaceId.1``, ``NetworkInterfaceId.2`` (the
member's ``locationName``, so ``Groups`` travels as ``SecurityGroupId.N`` and ``PrivateIpAddresses``
as ``PrivateIpAddress.N``); a filter is ``Filter.N.Name`` with ``Filter.N.Value.M``; a structure is
``Attachment.AttachmentId``; a tag specification is ``TagSpecification.N.ResourceType`` with
``TagSpecification.N.Tag.M.Key`` / ``.Value``; booleans are ``true`` / ``false`` and integers their
decimal text. :class:`Query` reads exactly that.

Strictness is the point of a wire double: a parameter the operation does not take answers
``UnknownParameter`` (as EC2 does), a missing required one ``MissingParameter``, a malformed integer
or boolean ``InvalidParameterValue``, so a provider that builds a request wrongly fails here instead
of being silently understood. Every refusal is a :class:`~providers.sim.records.SimError`, the
in-memory cloud's own error type, so the front end answers it like any error of the cloud.

Invariant: lists come back in the order of their numbers (``.2`` before ``.10``), whatever order the
form carried them in.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Collection, Mapping

from providers.sim.records import SimError

ALWAYS = frozenset({"Action", "Version"})
"""Parameters every request carries (the signature travels in headers, not in the form)."""

_NUMBERED = re.compile(r"^(\d+)(?:\.(.*))?$")


def parse_form(body: bytes | str) -> dict[str, str]:
    """The form's parameters by name (a name given twice keeps its last value, as EC2 does).

    Raises:
        SimError: ``InvalidParameterValue`` when the body is not UTF-8.
    """
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            raise SimError("InvalidParameterValue", "The request body is not UTF-8 text") from None
    return dict(urllib.parse.parse_qsl(body, keep_blank_values=True))


def _numbered(params: Mapping[str, str], prefix: str) -> list[tuple[int, str, str]]:
    """``(n, rest, value)`` for every key ``prefix.n[.rest]``, in the order of ``n``."""
    out: list[tuple[int, str, str]] = []
    start = prefix + "."
    for key, value in params.items():
        if key.startswith(start):
            found = _NUMBERED.match(key[len(start) :])
            if found is None:
                raise SimError("InvalidParameterValue", f"Malformed parameter name {key!r}")
            out.append((int(found.group(1)), found.group(2) or "", value))
    out.sort(key=lambda entry: entry[0])
    return out


class Query:
    """The parameters of one request, with EC2's refusals for what is missing or malformed."""

    def __init__(self, params: Mapping[str, str]) -> None:
        self.params = dict(params)
        self.action = self.params.get("Action", "")

    @classmethod
    def parse(cls, body: bytes | str) -> Query:
        """The request in ``body`` (form-encoded, as botocore POSTs it).

        Raises:
            SimError: ``InvalidParameterValue`` for a body that is not UTF-8.
        """
        return cls(parse_form(body))

    def only(self, accepted: Collection[str]) -> None:
        """Refuse any parameter outside ``accepted`` (names of the first segment: ``Filter``,
        ``Attachment``, ``NetworkInterfaceId``…), as EC2 refuses a parameter it does not know.

        Raises:
            SimError: ``UnknownParameter``.
        """
        for key in self.params:
            head = key.split(".", 1)[0]
            if head not in accepted and head not in ALWAYS:
                raise SimError("UnknownParameter", f"The parameter {head} is not recognized")

    def accept(self, modelled: Collection[str], not_modelled: Collection[str] = ()) -> None:
        """Refuse what EC2 takes but the in-memory cloud does not model (``UnsupportedOperation``,
        naming it), then anything else outside ``modelled`` (``UnknownParameter``).

        Raises:
            SimError: either refusal.
        """
        for key in self.params:
            head = key.split(".", 1)[0]
            if head in not_modelled:
                raise SimError(
                    "UnsupportedOperation",
                    f"{self.action}: the in-memory cloud does not model the parameter {head}",
                )
        self.only({*modelled, *not_modelled})

    def has(self, name: str) -> bool:
        return name in self.params

    def text(self, name: str, default: str | None = None) -> str:
        """A string parameter; required when there is no ``default``.

        Raises:
            SimError: ``MissingParameter``.
        """
        value = self.params.get(name)
        if value is None:
            if default is None:
                raise SimError("MissingParameter", f"The request must contain the parameter {name}")
            return default
        return value

    def integer(self, name: str, default: int | None = None) -> int:
        """An integer parameter; required when there is no ``default``.

        Raises:
            SimError: ``MissingParameter``; ``InvalidParameterValue`` for text that is not an integer.
        """
        raw = self.params.get(name)
        if raw is None:
            if default is None:
                raise SimError("MissingParameter", f"The request must contain the parameter {name}")
            return default
        try:
            return int(raw)
        except ValueError:
            raise SimError("InvalidParameterValue", f"Invalid value '{raw}' for {name}") from None

    def boolean(self, name: str, default: bool | None = None) -> bool:
        """A boolean parameter (``true`` / ``false``, any case); required without a ``default``.

        Raises:
            SimError: ``MissingParameter``; ``InvalidParameterValue`` for anything else.
        """
        raw = self.params.get(name)
        if raw is None:
            if default is None:
                raise SimError("MissingParameter", f"The request must contain the parameter {name}")
            return default
        if raw.lower() not in ("true", "false"):
            raise SimError("InvalidParameterValue", f"Invalid value '{raw}' for {name}: expected a boolean")
        return raw.lower() == "true"

    def strings(self, name: str) -> list[str]:
        """A flattened list ``name.1``, ``name.2``… (empty when absent).

        Raises:
            SimError: ``InvalidParameterValue`` for a member with a sub-key (``name.1.X``).
        """
        out: list[str] = []
        for n, rest, value in _numbered(self.params, name):
            if rest:
                raise SimError("InvalidParameterValue", f"Malformed parameter {name}.{n}.{rest}")
            out.append(value)
        return out

    def struct(self, name: str) -> dict[str, str]:
        """A structure ``name.Member`` → ``{Member: value}`` (empty when absent)."""
        start = name + "."
        return {key[len(start) :]: value for key, value in self.params.items() if key.startswith(start)}

    def filters(self) -> dict[str, list[str]]:
        """``Filter.N.Name`` / ``Filter.N.Value.M`` as name → values (a repeated name adds values).

        Raises:
            SimError: ``InvalidParameterValue`` for a filter without a name or without values.
        """
        names: dict[int, str] = {}
        values: dict[int, list[tuple[int, str]]] = {}
        for n, rest, value in _numbered(self.params, "Filter"):
            if rest == "Name":
                names[n] = value
                continue
            member = _NUMBERED.match(rest[len("Value.") :]) if rest.startswith("Value.") else None
            if member is None or member.group(2):
                raise SimError("InvalidParameterValue", f"Malformed parameter Filter.{n}.{rest}")
            values.setdefault(n, []).append((int(member.group(1)), value))
        out: dict[str, list[str]] = {}
        for n in sorted(set(names) | set(values)):
            if n not in names:
                raise SimError("InvalidParameterValue", f"Filter.{n} has values but no Name")
            if n not in values:
                raise SimError("InvalidParameterValue", f"The filter '{names[n]}' has no values")
            out.setdefault(names[n], []).extend(v for _, v in sorted(values[n]))
        return out

    def tag_specifications(self) -> dict[str, dict[str, str]]:
        """``TagSpecification.N.ResourceType`` with ``.Tag.M.Key`` / ``.Value``: resource type → tags.

        Raises:
            SimError: ``InvalidParameterValue`` for a specification without a resource type or a tag
                without a key; ``InvalidParameterValue`` for a resource type named twice.
        """
        types: dict[int, str] = {}
        keys: dict[tuple[int, int], str] = {}
        tag_values: dict[tuple[int, int], str] = {}
        for n, rest, value in _numbered(self.params, "TagSpecification"):
            if rest == "ResourceType":
                types[n] = value
                continue
            member = _NUMBERED.match(rest[len("Tag.") :]) if rest.startswith("Tag.") else None
            if member is None or member.group(2) not in ("Key", "Value"):
                raise SimError("InvalidParameterValue", f"Malformed parameter TagSpecification.{n}.{rest}")
            target = keys if member.group(2) == "Key" else tag_values
            target[(n, int(member.group(1)))] = value
        out: dict[str, dict[str, str]] = {}
        for n in sorted(set(types) | {n for n, _ in keys} | {n for n, _ in tag_values}):
            resource = types.get(n)
            if not resource:
                raise SimError("InvalidParameterValue", f"TagSpecification.{n} has no ResourceType")
            if resource in out:
                raise SimError("InvalidParameterValue", f"The resource type '{resource}' is specified twice")
            tags: dict[str, str] = {}
            for m in sorted({m for k, m in (*keys, *tag_values) if k == n}):
                key = keys.get((n, m))
                if key is None:
                    raise SimError("InvalidParameterValue", f"TagSpecification.{n}.Tag.{m} has no Key")
                tags[key] = tag_values.get((n, m), "")
            out[resource] = tags
        return out
