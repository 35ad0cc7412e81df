"""The node agent's configuration (``eni-ipam agent --config``): every bad document or file is a
:class:`~eni_ipam.errors.ConfigError` naming the field, ``eni-ipam agent`` exits 2 with it before
anything starts, and the document and the file are left as they were."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from eni_ipam import cli
from eni_ipam.agent.config import agent_config_from_mapping, load_agent_config
from eni_ipam.errors import ConfigError
from tests.bad_input import corpus


def _check(error: ConfigError, expect: dict[str, Any]) -> None:
    corpus.check_named(error.field, str(error), expect, key="field", contains="message_contains")


def _config_file(case: corpus.Case, tmp_path: Path) -> Path:
    return Path(case.data["path"]) if case.has("path") else case.write(tmp_path / "agent.yaml")


@pytest.mark.parametrize("case", corpus.params("agentconfig", lambda case: case.has("input")))
def test_a_bad_agent_configuration_is_refused_naming_the_field_and_left_unchanged(case: corpus.Case) -> None:
    document = case.data["input"]
    before = copy.deepcopy(document)
    with pytest.raises(ConfigError) as caught:
        agent_config_from_mapping(document)
    _check(caught.value, case.expect)
    assert document == before


@pytest.mark.parametrize("case", corpus.params("agentconfig"))
def test_the_agent_exits_2_naming_the_mistake_before_it_starts_anything(
    case: corpus.Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _config_file(case, tmp_path)
    before = path.read_bytes() if path.is_file() else None
    with pytest.raises(ConfigError) as caught:
        load_agent_config(path)
    _check(caught.value, case.expect)

    def never(*_: Any, **__: Any) -> None:
        raise AssertionError("the agent started on a bad configuration")

    monkeypatch.setattr("eni_ipam.agent.daemon.Agent.run", never)
    assert cli.main(["agent", "--node", "n1", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("invalid configuration: ") and str(caught.value) in err
    if before is not None:
        assert path.read_bytes() == before
