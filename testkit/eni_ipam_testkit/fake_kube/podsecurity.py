"""Pod Security admission, as far as the dev cluster can answer it truthfully.

The real PodSecurity admission plugin reads a namespace's ``pod-security.kubernetes.io/<mode>`` labels
(``enforce``, ``audit``, ``warn``) and their ``-version`` companions. This server does not evaluate the
``baseline`` and ``restricted`` profiles, so it never judges a pod by them; where a cluster would judge,
it refuses out loud instead (501 ``NotImplemented`` naming the level), never storing what a cluster
might refuse or leaving out the warnings a cluster would give:

* a pod created (or its spec changed) in a namespace whose ``enforce`` or ``warn`` level is
  ``baseline`` or ``restricted``;
* a workload with a pod template (Deployments, DaemonSets, StatefulSets, ReplicaSets, Jobs, CronJobs,
  ReplicationControllers, PodTemplates) created or changed in a namespace whose ``warn`` level is
  one of those (the real plugin only warns about templates; it never enforces on them);
* a namespace whose ``enforce`` level is raised to one of those while it holds pods (the real plugin
  answers with warnings about the pods that would now be refused).

``privileged`` (and no label) allows everything, as on a cluster, so the chart's privileged agent runs.
The labels themselves are validated as the plugin validates them: a level is one of ``privileged``,
``baseline``, ``restricted`` and a version is ``latest`` or ``v1.<minor>``, else the namespace write is
the plugin's 422 (``metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must
be one of privileged, baseline, restricted``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from eni_ipam_testkit.fake_kube.resources import JSON, FieldError, StatusError, invalid

if TYPE_CHECKING:
    from eni_ipam_testkit.fake_kube.store import Change

PREFIX: Final = "pod-security.kubernetes.io/"
LEVELS: Final = ("privileged", "baseline", "restricted")
_JUDGED: Final = frozenset({"baseline", "restricted"})
_VERSION: Final = re.compile(r"v1\.(0|[1-9][0-9]*)")
_TEMPLATES: Final = frozenset(
    {
        ("apps", "deployments"),
        ("apps", "daemonsets"),
        ("apps", "statefulsets"),
        ("apps", "replicasets"),
        ("batch", "jobs"),
        ("batch", "cronjobs"),
        ("", "replicationcontrollers"),
        ("", "podtemplates"),
    }
)


def _labels(obj: JSON | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def label_errors(labels: dict[str, str]) -> list[FieldError]:
    """The plugin's checks of a namespace's Pod Security labels."""
    errors = []
    for mode in ("enforce", "audit", "warn"):
        key = f"{PREFIX}{mode}"
        if key in labels and labels[key] not in LEVELS:
            errors.append(
                invalid(f"metadata.labels[{key}]", labels[key], "must be one of " + ", ".join(LEVELS))
            )
        version = labels.get(f"{key}-version")
        if version is not None and version != "latest" and _VERSION.fullmatch(version) is None:
            errors.append(invalid(f"metadata.labels[{key}-version]", version, f'invalid version "{version}"'))
    return errors


def _not_emulated(level: str, mode: str, namespace: str, what: str) -> StatusError:
    message = (
        f'the dev cluster does not enforce Pod Security level "{level}": namespace "{namespace}" is '
        f"labelled {PREFIX}{mode}={level}, and {what} would be judged by it on a cluster; check it against "
        "a cluster, or use a namespace labelled privileged (docs/testing.md)"
    )
    return StatusError(501, message, reason="NotImplemented")


class PodSecurity:
    """The admission step (see the module doc); ``find(plural, namespace, name)`` reads the store and
    ``objects(plural)`` lists it."""

    def __init__(
        self,
        find: Callable[[str, str | None, str], JSON | None],
        objects: Callable[[str], list[JSON]],
    ) -> None:
        self._find = find
        self._objects = objects

    def __call__(self, change: Change) -> None:
        rtype = change.rtype
        if change.operation not in ("CREATE", "UPDATE") or change.subresource or change.new is None:
            return
        if (rtype.group, rtype.plural) == ("", "namespaces"):
            self._namespace(change)
            return
        template = (rtype.group, rtype.plural) in _TEMPLATES
        if not template and (rtype.group, rtype.plural) != ("", "pods"):
            return
        if change.old is not None and (change.old.get("spec") == change.new.get("spec")):
            return  # metadata-only and status updates are exempt, as on a cluster
        namespace = (change.new.get("metadata") or {}).get("namespace") or ""
        labels = _labels(self._find("namespaces", None, namespace))
        modes = ("warn",) if template else ("enforce", "warn")
        for mode in modes:
            level = labels.get(f"{PREFIX}{mode}", "")
            if level in _JUDGED:
                what = f"this {rtype.kind}'s pod template" if template else "this pod"
                raise _not_emulated(level, mode, namespace, what)

    def _namespace(self, change: Change) -> None:
        assert change.new is not None
        name = (change.new.get("metadata") or {}).get("name") or ""
        labels = _labels(change.new)
        errors = label_errors(labels)
        if errors:
            text = str(errors[0]) if len(errors) == 1 else f"[{', '.join(str(e) for e in errors)}]"
            details = {"name": name, "kind": "namespaces", "causes": [{"message": str(e)} for e in errors]}
            raise StatusError(
                422, f'namespaces "{name}" is invalid: {text}', reason="Invalid", details=details
            )
        level = labels.get(f"{PREFIX}enforce", "")
        before = _labels(change.old).get(f"{PREFIX}enforce", "")
        pods = (p for p in self._objects("pods") if (p.get("metadata") or {}).get("namespace") == name)
        if level in _JUDGED and level != before and any(True for _ in pods):
            raise _not_emulated(level, "enforce", name, "the pods it holds")
