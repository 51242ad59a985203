"""Every flag of every command explains itself in ``--help``: what it does and its default."""

from __future__ import annotations

import argparse
import io

from kyma_operator.config import build_parser as operator_parser
from kyma_operator.listener.__main__ import build_parser as listener_parser


def _actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not isinstance(a, argparse._HelpAction)]


def _help(parser: argparse.ArgumentParser) -> str:
    out = io.StringIO()
    parser.print_help(out)
    return " ".join(out.getvalue().split())


def test_every_operator_flag_has_a_description_a_default_and_its_variable() -> None:
    parser = operator_parser()
    for action in _actions(parser):
        text = action.help or ""
        description, _, rest = text.partition(" (default: ")
        assert len(description.split()) >= 3, f"{action.option_strings}: no description ({text!r})"
        assert rest and "env KLM_" in rest, f"{action.option_strings}: no default/env ({text!r})"
    assert "Runtime events for one Kyma within this window" in _help(parser)
    assert "(default: 0.5; env KLM_EVENT_THROTTLE_WINDOW)" in _help(parser)
    assert "or json (one JSON object per line" in _help(parser)
    assert "(default: text; env KLM_LOG_FORMAT)" in _help(parser)


def test_every_listener_flag_has_a_description_and_shows_its_default() -> None:
    parser = listener_parser()
    for action in _actions(parser):
        assert len((action.help or "").split()) >= 3, f"{action.option_strings}: no description"
    text = _help(parser)
    assert "port to listen on (default: 8082)" in text
    assert "(default: signature)" in text
    assert "(default: None)" not in text  # unset values say what happens instead
    assert "one JSON object per line (ts, level, logger, msg) (default: text)" in text


def test_the_agents_help_explains_every_variable_with_its_default() -> None:
    from skr_watcher.config import AgentConfig, environment_help

    text = environment_help()
    for field in AgentConfig.model_fields.values():
        line = next(line for line in text.splitlines() if line.split()[:1] == [str(field.validation_alias)])
        assert len(line.split()) >= 5, f"{field.validation_alias}: no description ({line!r})"
        assert "(required)" in line or "(default: " in line, line
