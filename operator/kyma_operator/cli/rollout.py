"""``kyma module rollout status|pause|resume|abort``: fleet rollouts of module versions in a KCP.

Why: issue 27 / docs/rollouts.md §11. A fleet operator needs one command to see where a module
version's rollout is (wave, counts, why it halted), one to see why a given Kyma still has the old
version, and three to steer it. The commands only read ``ModuleRollout`` objects and write their
``spec.state`` (+ ``ignoredKymas``, ``approvedWaves``) with a merge patch carrying the object's
resourceVersion, so a change made meanwhile by someone else is re-read and decided again instead of
being overwritten; the reason goes into the ``state-reason`` annotation. ``--watch`` follows the
runs with an API watch (no polling) and returns once they reach an end phase. Exit codes
(``rolloutview``): 0 fine, 1 halted/reverting/reverted (one line), 2 usage or no such run, 3 the API
is unreachable or denies access.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from kyma_operator.api import names
from kyma_operator.api.meta import InvalidObjectError
from kyma_operator.api.modulerollout import TERMINAL_PHASES, ModuleRollout, Phase, RolloutState
from kyma_operator.cli import rolloutkyma
from kyma_operator.cli import rolloutview as view
from kyma_operator.cli.common import KubeconfigOpt, OutputOpt, kube_client
from kyma_operator.cli.errors import CliError, describe, expected_errors
from kyma_operator.cli.output import OutputFormat, emit, note, stdout

if TYPE_CHECKING:
    from rich.console import Console

    from kyma_operator.runtime.kube import KubeClient

FIELD_MANAGER = "kyma-cli"
_CONFLICT_RETRIES = 5

app = typer.Typer(
    help="Fleet rollouts of module versions in a control plane (KCP): show them, pause, resume or abort "
    "them (docs/rollouts.md). Exit codes: 0 fine, 1 a rollout halted or reverted, 2 usage error or no "
    "such rollout, 3 the API server is unreachable or denies access.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

ModuleArg = Annotated[
    str | None,
    typer.Argument(
        help="Module name (all its rollouts; with --channel only that channel's).", show_default=False
    ),
]
ChannelOpt = Annotated[
    str | None,
    typer.Option(
        "--channel",
        "-c",
        help="Only the module's rollouts on this channel ('mandatory' for mandatory modules).",
    ),
]
RolloutOpt = Annotated[
    str | None,
    typer.Option(
        "--rollout", help="The ModuleRollout by name (<module>-<channel>-<toVersion>), instead of MODULE."
    ),
]
NamespaceOpt = Annotated[
    str, typer.Option("--namespace", "-n", help="KCP namespace of the ModuleRollout objects.")
]
ReasonOpt = Annotated[
    str | None,
    typer.Option(
        "--reason",
        help="Why; recorded on the ModuleRollout (annotation " + names.STATE_REASON_ANNOTATION + ").",
    ),
]


class NoSuchRollout(CliError):
    """No run matches (exit 2, like a usage error)."""


class UsageError(CliError):
    """The arguments do not name what the command needs (exit 2)."""


class RolloutFailing(CliError):
    """A command met a halted/reverting/reverted run it cannot act on as asked (exit 1); the message
    is the halt line, ``hint`` a second line."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint


def _run(body: Coroutine[Any, Any, int]) -> None:
    """Run a command body and exit with its code; expected failures print one line (codes 1-3)."""
    from kyma_operator.runtime.errors import KubeError

    try:
        code = asyncio.run(body)
    except (NoSuchRollout, UsageError) as exc:
        note(f"Error: {describe(exc)}")
        raise typer.Exit(view.EXIT_USAGE) from None
    except RolloutFailing as exc:
        note(str(exc))
        if exc.hint:
            note(exc.hint)
        raise typer.Exit(view.EXIT_HALTED) from None
    except Exception as exc:
        if not isinstance(exc, expected_errors()):
            raise
        note(f"Error: {describe(exc)}")
        access = isinstance(exc, KubeError) and exc.status in (0, 401, 403)
        raise typer.Exit(view.EXIT_API if access else 1) from None
    except KeyboardInterrupt:
        note("Error: interrupted")
        raise typer.Exit(130) from None
    if code:
        raise typer.Exit(code)


# -- reading runs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Which runs a command is about: one by name, a module's (on a channel), or all."""

    namespace: str
    module: str | None = None
    channel: str | None = None
    rollout: str | None = None

    def matches(self, run: ModuleRollout) -> bool:
        if self.rollout is not None and run.name != self.rollout:
            return False
        if self.module is not None and run.spec.module != self.module:
            return False
        return self.channel is None or run.spec.channel == self.channel

    def describe(self) -> str:
        if self.rollout is not None:
            return f"ModuleRollout {self.namespace}/{self.rollout}"
        what = f"module {self.module}" if self.module else "any module"
        channel = f" on channel {self.channel}" if self.channel else ""
        return f"ModuleRollout for {what}{channel} in namespace {self.namespace}"


def parse_run(obj: dict[str, Any]) -> ModuleRollout:
    try:
        return ModuleRollout.from_object(obj)
    except InvalidObjectError as exc:
        raise CliError(str(exc).splitlines()[0]) from exc


def _order(run: ModuleRollout) -> tuple[str, str, datetime.datetime, str]:
    created = run.metadata.creation_timestamp or datetime.datetime.min.replace(tzinfo=datetime.UTC)
    return run.spec.module, run.spec.channel, created, run.name


def select(
    objects: Sequence[dict[str, Any]], selection: Selection
) -> list[tuple[ModuleRollout, dict[str, Any]]]:
    runs = [(parse_run(obj), obj) for obj in objects]
    chosen = [(run, obj) for run, obj in runs if selection.matches(run)]
    return sorted(chosen, key=lambda pair: _order(pair[0]))


async def list_runs(client: KubeClient, namespace: str) -> tuple[list[dict[str, Any]], str]:
    """Every run in the namespace (a handful of objects) and the list's resourceVersion."""
    from kyma_operator.api.resources import MODULE_ROLLOUTS
    from kyma_operator.runtime.errors import NotFound

    try:
        listed = await client.list_all(MODULE_ROLLOUTS, namespace)
    except NotFound:
        raise NoSuchRollout(
            f"this cluster serves no {names.MODULE_ROLLOUT.kind} (CRD {names.MODULE_ROLLOUT.crd_name}): "
            "point --kubeconfig at a control plane (KCP) with fleet rollouts"
        ) from None
    return listed.items, listed.resource_version


async def read_selected(
    client: KubeClient, selection: Selection
) -> tuple[list[tuple[ModuleRollout, dict[str, Any]]], list[dict[str, Any]], str]:
    objects, version = await list_runs(client, selection.namespace)
    chosen = select(objects, selection)
    if not chosen:
        raise NoSuchRollout(f"no {selection.describe()}")
    return chosen, objects, version


# -- status ----------------------------------------------------------------------------------------


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def render_table(runs: Sequence[ModuleRollout], now: datetime.datetime) -> None:
    emit([view.run_row(run, now) for run in runs], OutputFormat.TABLE, view.RUN_COLUMNS)
    for run in runs:
        spec = run.spec
        typer.echo(
            f"\n{run.name}: module {spec.module}, channel {spec.channel}, {spec.from_version} -> "
            f"{spec.to_version}, policy {spec.policy_ref or '-'}, state {spec.state.value}"
        )
        emit(view.wave_rows(run), OutputFormat.TABLE, view.WAVE_COLUMNS)


def render_documents(docs: list[dict[str, Any]], output: OutputFormat) -> None:
    emit(docs, output)


def status(
    kubeconfig: KubeconfigOpt,
    module: ModuleArg = None,
    channel: ChannelOpt = None,
    rollout: RolloutOpt = None,
    kyma: Annotated[
        str | None,
        typer.Option(
            "--kyma",
            help="Show this Kyma (in --namespace) instead: its wave in each rollout, whether the wave is "
            "released and why it is held (computed here from the rollout and the Kyma).",
        ),
    ] = None,
    output: OutputOpt = OutputFormat.TABLE,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            "-w",
            help="Follow the rollouts (an API watch, no polling) until each reaches an end phase: Completed, "
            "Aborted, Superseded, Invalid, Halted or Reverted. Redraws on a terminal, one line per change "
            "otherwise (json/yaml: one document per change).",
        ),
    ] = False,
    namespace: NamespaceOpt = names.KCP_NAMESPACE,
) -> None:
    """Show fleet rollouts: one line per rollout (phase, wave, counts), then its waves.

    Exit code 1 with one line per rollout that is Halted, Reverting or Reverted.
    """
    selection = Selection(namespace, module, channel, rollout)

    async def body() -> int:
        async with kube_client(kubeconfig) as client:
            chosen, objects, version = await read_selected(client, selection)
            kyma_obj = await _read_kyma(client, namespace, kyma) if kyma else None
            if watch:
                runs = await follow(client, selection, objects, version, output, kyma_obj)
            else:
                runs = [run for run, _ in chosen]
                show(chosen, output, kyma_obj)
        for line in view.failing_lines(runs):
            note(line)
        return view.exit_code(runs)

    _run(body())


def show(
    chosen: Sequence[tuple[ModuleRollout, dict[str, Any]]], output: OutputFormat, kyma: dict[str, Any] | None
) -> None:
    runs = [run for run, _ in chosen]
    if kyma is not None:
        rows = [rolloutkyma.kyma_row(run, kyma) for run in runs]
        emit(rows, output, rolloutkyma.KYMA_COLUMNS)
    elif output is OutputFormat.TABLE:
        render_table(runs, _now())
    else:
        render_documents([view.document(obj) for _, obj in chosen], output)


async def _read_kyma(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    from kyma_operator.api.resources import KYMAS
    from kyma_operator.runtime.errors import NotFound

    try:
        kyma: dict[str, Any] = await client.get(KYMAS, name, namespace)
    except NotFound:
        raise NoSuchRollout(f"no Kyma {namespace}/{name}") from None
    return kyma


# -- --watch ---------------------------------------------------------------------------------------


class Redraw:
    """Draws each change: in place on a terminal, one line (or document) per changed run otherwise."""

    def __init__(
        self, output: OutputFormat, kyma: dict[str, Any] | None, console: Console | None = None
    ) -> None:
        self.output = output
        self.kyma = kyma
        self.console = console or stdout()
        self.live: Any = None
        self.last: dict[str, str] = {}
        if output is OutputFormat.TABLE and self.console.is_terminal:
            from rich.live import Live

            self.live = Live(console=self.console, auto_refresh=False, transient=False)
            self.live.start()

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()

    def draw(self, chosen: Sequence[tuple[ModuleRollout, dict[str, Any]]]) -> None:
        now = _now()
        if self.live is not None:
            self.live.update(self._renderable(chosen, now), refresh=True)
            return
        for run, obj in chosen:
            if self.output is OutputFormat.TABLE:
                text = self._line(run, now)
                key = text.split(" ", 1)[1]  # without the time: print changes only
            else:
                doc = view.document(obj)
                text = (
                    json.dumps(doc)
                    if self.output is OutputFormat.JSON
                    else "---\n" + yaml.safe_dump(doc, sort_keys=False).rstrip()
                )
                key = json.dumps(doc, sort_keys=True)
            if self.last.get(run.name) != key:
                self.last[run.name] = key
                sys.stdout.write(text + "\n")
                sys.stdout.flush()

    def _line(self, run: ModuleRollout, now: datetime.datetime) -> str:
        if self.kyma is None:
            return view.watch_line(run, now)
        return f"{now.strftime('%H:%M:%S')} {rolloutkyma.kyma_line(run, self.kyma)}"

    def _renderable(
        self, chosen: Sequence[tuple[ModuleRollout, dict[str, Any]]], now: datetime.datetime
    ) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> Table:
            out = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
            for _, header in columns:
                out.add_column(header)
            for row in rows:
                out.add_row(*("-" if row.get(key) is None else str(row.get(key)) for key, _ in columns))
            return out

        runs = [run for run, _ in chosen]
        if self.kyma is not None:
            return table([rolloutkyma.kyma_row(run, self.kyma) for run in runs], rolloutkyma.KYMA_COLUMNS)
        parts: list[Any] = [table([view.run_row(run, now) for run in runs], view.RUN_COLUMNS)]
        for run in runs:
            parts.append(Text(f"\n{run.name}"))
            parts.append(table(view.wave_rows(run), view.WAVE_COLUMNS))
        return Group(*parts)


async def follow(
    client: KubeClient,
    selection: Selection,
    objects: list[dict[str, Any]],
    version: str,
    output: OutputFormat,
    kyma: dict[str, Any] | None,
) -> list[ModuleRollout]:
    """Draw the selected runs, then each change an API watch delivers, until they all reach an end
    phase; a run named by --rollout that is deleted meanwhile ends the watch as "no such run"."""
    from kyma_operator.api.resources import MODULE_ROLLOUTS
    from kyma_operator.runtime.errors import Gone

    known = {obj["metadata"]["name"]: obj for obj in objects}
    redraw = Redraw(output, kyma)
    try:
        chosen = select(list(known.values()), selection)
        redraw.draw(chosen)
        while not view.watch_done([run for run, _ in chosen]):
            try:
                async for event in client.watch(
                    MODULE_ROLLOUTS, selection.namespace, resource_version=version
                ):
                    obj = event.object
                    if event.type == "ERROR":
                        raise Gone(
                            int(obj.get("code") or 410), str(obj.get("reason")), str(obj.get("message"))
                        )
                    version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                    if event.type == "BOOKMARK":
                        continue
                    if event.type == "DELETED":
                        known.pop(obj["metadata"]["name"], None)
                    else:
                        known[obj["metadata"]["name"]] = obj
                    chosen = select(list(known.values()), selection)
                    if not chosen:
                        raise NoSuchRollout(f"{selection.describe()} was deleted")
                    redraw.draw(chosen)
                    if view.watch_done([run for run, _ in chosen]):
                        break
            except Gone:  # the watch's resourceVersion expired: read the current state once, go on
                fresh, version = await list_runs(client, selection.namespace)
                known = {obj["metadata"]["name"]: obj for obj in fresh}
                chosen = select(fresh, selection)
                if not chosen:
                    raise NoSuchRollout(f"{selection.describe()} was deleted") from None
                redraw.draw(chosen)
    finally:
        redraw.close()
    return [run for run, _ in chosen]


# -- pause / resume / abort ------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """What a steering command does to one run: a merge patch (None: nothing to write) and what to say."""

    patch: dict[str, Any] | None
    message: str


def _annotated(run: ModuleRollout, spec: dict[str, Any], reason: str) -> dict[str, Any]:
    return {
        "metadata": {
            "resourceVersion": run.metadata.resource_version,
            "annotations": {names.STATE_REASON_ANNOTATION: reason},
        },
        "spec": spec,
    }


def plan_pause(run: ModuleRollout, reason: str | None) -> Change:
    phase = run.status.phase
    if phase in TERMINAL_PHASES:
        raise CliError(f"rollout {run.name} is {phase.value}: nothing to pause")
    if run.spec.state is RolloutState.ABORTED:
        raise CliError(f"rollout {run.name} is being aborted: nothing to pause")
    if run.spec.state is RolloutState.PAUSED:
        return Change(None, f"rollout {run.name} already paused (unchanged)")
    text = reason or "paused with `kyma module rollout pause`"
    return Change(
        _annotated(run, {"state": RolloutState.PAUSED.value}, text),
        f"rollout {run.name} paused: no further Kymas are released (released ones still upgrade)",
    )


def plan_abort(run: ModuleRollout, reason: str | None) -> Change:
    phase = run.status.phase
    if phase is Phase.ABORTED or run.spec.state is RolloutState.ABORTED:
        return Change(None, f"rollout {run.name} already aborted (unchanged)")
    if phase in TERMINAL_PHASES:
        raise CliError(f"rollout {run.name} is {phase.value}: nothing to abort")
    text = reason or "aborted with `kyma module rollout abort`"
    return Change(
        _annotated(run, {"state": RolloutState.ABORTED.value}, text),
        f"rollout {run.name} aborted: Kymas not yet released keep {run.spec.from_version} until the channel "
        "moves again (delete the ModuleRollout to let every Kyma follow the channel)",
    )


def plan_resume(run: ModuleRollout, ignore_failed: bool, namespace: str) -> Change:
    phase = run.status.phase
    if phase in TERMINAL_PHASES:
        raise CliError(f"rollout {run.name} is {phase.value}: nothing to resume")
    if run.spec.state is RolloutState.ABORTED:
        raise CliError(f"rollout {run.name} was aborted: an aborted rollout cannot be resumed")
    if phase is Phase.REVERTING:
        raise RolloutFailing(view.halt_line(run), "hint: a revert cannot be resumed; wait for it to finish")
    failed = sorted(set(run.status.failed_kymas) - set(run.spec.ignored_kymas))
    if phase is Phase.HALTED and not ignore_failed:
        raise RolloutFailing(view.halt_line(run), view.resume_hint(run, namespace))
    spec: dict[str, Any] = {}
    said: list[str] = []
    if ignore_failed and failed:
        spec["ignoredKymas"] = sorted({*run.spec.ignored_kymas, *failed})
        said.append(f"{len(failed)} failed Kyma(s) exempted from the failure budget ({', '.join(failed)})")
        if run.status.totals.failed > len(run.status.failed_kymas):
            said.append(
                f"only the {len(run.status.failed_kymas)} listed in status.failedKymas of "
                f"{run.status.totals.failed} failed: the others still count"
            )
    if phase is Phase.AWAITING_APPROVAL:
        wave = view.wave_name(run, view.current_wave(run))
        if wave not in run.spec.approved_waves:
            spec["approvedWaves"] = [*run.spec.approved_waves, wave]
            said.append(f"wave {wave} approved")
    if run.spec.state is RolloutState.PAUSED or phase is Phase.HALTED:
        spec["state"] = RolloutState.RUNNING.value
    if not spec:
        return Change(None, f"rollout {run.name} is {phase.value}, not paused (unchanged)")
    spec.setdefault("state", RolloutState.RUNNING.value)
    text = "resumed with `kyma module rollout resume`" + (f": {'; '.join(said)}" if said else "")
    return Change(
        _annotated(run, spec, text), f"rollout {run.name} resumed" + (f": {'; '.join(said)}" if said else "")
    )


async def steer(client: KubeClient, selection: Selection, plan: Callable[[ModuleRollout], Change]) -> str:
    """Read the one run the selection names, decide, merge-patch with its resourceVersion; on a
    conflict (someone changed it meanwhile) read and decide again."""
    from kyma_operator.api.resources import MODULE_ROLLOUTS
    from kyma_operator.runtime.errors import Conflict

    for _ in range(_CONFLICT_RETRIES):
        run = await one_run(client, selection)
        change = plan(run)
        if change.patch is None:
            return change.message
        try:
            await client.patch(
                MODULE_ROLLOUTS, run.name, change.patch, selection.namespace, field_manager=FIELD_MANAGER
            )
        except Conflict:
            continue
        return change.message
    raise CliError(f"rollout {selection.rollout or selection.module} keeps changing; try again")


async def one_run(client: KubeClient, selection: Selection) -> ModuleRollout:
    """The run a steering command acts on: the named one, or the module's only open one."""
    chosen, _, _ = await read_selected(client, selection)
    runs = [run for run, _ in chosen]
    if selection.rollout is not None:
        return runs[0]
    open_runs = [run for run in runs if run.status.phase not in TERMINAL_PHASES]
    if not open_runs:
        latest = ", ".join(f"{run.name} ({run.status.phase.value})" for run in runs)
        raise NoSuchRollout(f"no open {selection.describe()} (only finished ones: {latest})")
    if len(open_runs) > 1:
        found = ", ".join(run.name for run in open_runs)
        raise UsageError(
            f"{len(open_runs)} open rollouts match ({found}): name one with --rollout or --channel"
        )
    return open_runs[0]


def _steer(kubeconfig: Path, selection: Selection, plan: Callable[[ModuleRollout], Change]) -> None:
    """The body of pause/resume/abort: steer the selected run by ``plan`` and print what was done."""

    async def body() -> int:
        async with kube_client(kubeconfig) as client:
            typer.echo(await steer(client, selection, plan))
        return 0

    _run(body())


def _selection(module: str | None, channel: str | None, rollout: str | None, namespace: str) -> Selection:
    if not module and not rollout:
        raise typer.BadParameter("name a MODULE or --rollout NAME")
    return Selection(namespace, module, channel, rollout)


def pause(
    kubeconfig: KubeconfigOpt,
    module: ModuleArg = None,
    channel: ChannelOpt = None,
    rollout: RolloutOpt = None,
    reason: ReasonOpt = None,
    namespace: NamespaceOpt = names.KCP_NAMESPACE,
) -> None:
    """Pause a rollout: no further Kymas are released (already released ones still upgrade, and a
    failure still halts it)."""
    selection = _selection(module, channel, rollout, namespace)

    _steer(kubeconfig, selection, lambda run: plan_pause(run, reason))


def resume(
    kubeconfig: KubeconfigOpt,
    module: ModuleArg = None,
    channel: ChannelOpt = None,
    rollout: RolloutOpt = None,
    ignore_failed: Annotated[
        bool,
        typer.Option(
            "--ignore-failed",
            help="Resume a Halted rollout: copy its failed Kymas into spec.ignoredKymas so they no longer "
            "count against the failure budget (without it, resuming a halted rollout exits 1).",
        ),
    ] = False,
    namespace: NamespaceOpt = names.KCP_NAMESPACE,
) -> None:
    """Resume a paused rollout, approve a wave that awaits manual approval, or (with --ignore-failed)
    resume a halted one."""
    selection = _selection(module, channel, rollout, namespace)

    _steer(kubeconfig, selection, lambda run: plan_resume(run, ignore_failed, namespace))


def abort(
    kubeconfig: KubeconfigOpt,
    module: ModuleArg = None,
    channel: ChannelOpt = None,
    rollout: RolloutOpt = None,
    reason: ReasonOpt = None,
    namespace: NamespaceOpt = names.KCP_NAMESPACE,
) -> None:
    """Abort a rollout for good: nothing more is released; Kymas keep the version they have until the
    channel moves again (taking the module out of every ModuleRolloutPolicy lets every Kyma follow the
    channel at once; a deleted ModuleRollout is created again)."""
    selection = _selection(module, channel, rollout, namespace)

    _steer(kubeconfig, selection, lambda run: plan_abort(run, reason))


app.command("status")(status)
app.command("pause")(pause)
app.command("resume")(resume)
app.command("abort")(abort)
