"""What the simulator and the demo need of a cloud that lives in this process, and where they find one.

A scenario file names its cloud by section: ``cloud:`` (the in-memory EC2) or ``generic:`` (the
generic provider, no cloud). Each section is an *emulator* registered under the ``eni_ipam.emulators``
entry points by the distribution that ships it (the product registers ``cloud`` from
:mod:`providers.sim` and ``generic`` from :mod:`providers.generic`), so :mod:`eni_ipam` never imports
a provider: it reads a section with the emulator's own model and runs the reconciler against the
provider the emulator opens.

Contract of an :class:`Emulator`:

* :attr:`~Emulator.DECLARATION` validates the section whole (every reference resolves), raising
  pydantic's errors so that the scenario reader names the offending key;
* :meth:`~Emulator.instances` says which instances a node may name (None: any; a node is then its own
  instance when it names none);
* :attr:`~Emulator.CHANGE` is what a ``cloud`` step may change (None: the emulator has nothing to
  change), and :meth:`~Emulator.check_change` refuses a change naming what the declaration lacks,
  raising :class:`~eni_ipam.config.schema.FieldError` relative to the step;
* :meth:`~Emulator.open` builds the world on the given clock; it raises
  :class:`~eni_ipam.errors.ConfigError` for what the cloud itself refuses (an unknown instance type),
  naming the instance under ``path``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Protocol, cast

from eni_ipam.adapters.plugins import named, registered
from eni_ipam.config.schema import ConfigModel
from eni_ipam.core.clock import Clock
from eni_ipam.core.model import Instance
from eni_ipam.core.observe import ApiObserver
from eni_ipam.core.provider import Provider
from eni_ipam.core.records import NodeRecords

GROUP = "eni_ipam.emulators"
"""Entry-point group of the emulators; an entry's name is its scenario section (``cloud``, ``generic``)."""


class Emulation(Protocol):
    """One emulated world: the provider the reconciler runs against, and what a run reads of it."""

    @property
    def provider(self) -> Provider: ...

    @property
    def calls(self) -> Mapping[str, int]:
        """Calls received so far, by operation (a scenario's ``api_calls``; cumulative)."""
        ...

    def instance_view(self, instance_id: str) -> Instance | None:
        """The instance as the cloud holds it now (None: unknown), read without a call."""
        ...

    def change(self, change: Any) -> None:
        """Apply a ``cloud`` step validated by the emulator's :attr:`Emulator.CHANGE`."""
        ...

    def set_latency(self, operation: str | None, seconds: float) -> None:
        """Every later call of ``operation`` (None: of all) takes ``seconds``."""
        ...

    def instance_types(self) -> Collection[str]:
        """The instance types whose limits the cloud knows: what a failed expectation offers in
        place of an unknown type ("did you mean …")."""
        ...


class Emulator(Protocol):
    """A scenario section's cloud (see the module's contract)."""

    DECLARATION: type[ConfigModel]
    CHANGE: type[ConfigModel] | None

    def instances(self, declaration: Any) -> Collection[str] | None: ...

    def check_change(self, declaration: Any, change: Any) -> None: ...

    def open(
        self,
        declaration: Any,
        *,
        clock: Clock,
        metrics: ApiObserver,
        records: NodeRecords,
        path: str,
    ) -> Emulation: ...


def emulators() -> dict[str, Emulator]:
    """Every registered emulator by section name, loaded (their modules import no cloud SDK)."""
    return cast(dict[str, Emulator], registered(GROUP))


def emulator(section: str) -> Emulator:
    """The emulator of scenario section ``section``.

    Raises:
        ConfigError: ``section``: no emulator of that name is installed.
    """
    return cast(Emulator, named(GROUP, section, field=section))
