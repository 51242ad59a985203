"""``python -m kyma_operator.listener``: the log format flag takes text or json and nothing else."""

from __future__ import annotations

import pytest

from kyma_operator.listener.__main__ import parse_args


def test_log_format_defaults_to_text_and_takes_json() -> None:
    assert parse_args(["--kubeconfig", "kcp", "--print"])[0].log_format == "text"
    assert parse_args(["--kubeconfig", "kcp", "--print", "--log-format", "json"])[0].log_format == "json"


def test_an_unknown_log_format_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["--kubeconfig", "kcp", "--print", "--log-format", "xml"])
    assert exited.value.code == 2
    assert "invalid choice: 'xml'" in capsys.readouterr().err
