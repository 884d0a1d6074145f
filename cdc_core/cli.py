"""`cdc`: the operator's command line. Works without Airflow and runs the same code the DAG tasks run.

Exit codes: 0 done; 75 skipped because another run holds the lease (`maintain`: after waiting for it);
9 a group pipeline's run where some sources failed and the others landed (`PartialFailure`); otherwise the
error's `exit_code` (2 configuration or usage, 3 source, 4 coordination, 5 fenced, 6 staging, 7 schema, 8 lake).

One spelling per concept: the argument is always the pipeline; a group pipeline's source is `--source <id>`;
"at most this many windows now" is `--max-windows`. The old spellings (`<pipeline>.<source>` as the argument,
`--windows`) still work, with a deprecation warning on stderr.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from cdc_core.model.errors import CdcError, ConfigError, LeaseHeld, PartialFailure
from cdc_core.model.sources import command_target, split_unit, unit_name

if TYPE_CHECKING:
    from cdc_core.run.group import GroupRun
    from cdc_core.run.loop import WindowsRun

F = TypeVar("F", bound=Callable[..., Any])


def _load(config_path: str | None) -> Any:
    from cdc_core.model.config import load_config

    return load_config(config_path)


def source_params_for(pipeline_config: Any, source: str | None = None) -> Any:
    """Source credentials from the Airflow connection named in the config (env AIRFLOW_CONN_<ID>); `source`:
    which source of a group pipeline."""
    from cdc_core.capture.source import SourceParams
    from cdc_core.model.connections import resolve_connection

    return SourceParams.from_connection(resolve_connection(pipeline_config.source_config(source).conn_id))


# ---------------------------------------------------------------------------- one spelling per concept


def source_spelling(name: str, sources: Sequence[str] = ()) -> tuple[str, tuple[str, ...], str | None]:
    """(pipeline, sources, deprecation warning or None) from a command's argument and its `--source` options.

    The argument names the pipeline; `<pipeline>.<source>` (the old spelling of one source) still names
    that source, with a warning. Naming a source both ways, differently, is a usage error."""
    pipeline, named = split_unit(name)
    if named is None:
        return pipeline, tuple(sources), None
    if sources and tuple(sources) != (named,):
        raise click.UsageError(f"{name!r} names source {named!r} but --source says {', '.join(sources)}")
    warning = (
        f"warning: {name!r} is deprecated: write `{pipeline} --source {named}` (the argument names the pipeline, "
        "--source one of its sources)"
    )
    return pipeline, (named,), warning


def windows_spelling(max_windows: int, max_given: bool, old: int | None) -> tuple[int, str | None]:
    """The number of windows from `--max-windows` and its deprecated old name `--windows` (None: not given),
    with the deprecation warning when the old name was used. Both, disagreeing, is a usage error."""
    if old is None:
        return max_windows, None
    if max_given and old != max_windows:
        raise click.UsageError(f"--windows {old} and --max-windows {max_windows}: --windows is the old name of "
                               "--max-windows, give only --max-windows")
    return old, "warning: --windows is deprecated: write --max-windows (at most this many windows now)"


def max_windows_option(default: int, minimum: int, help_text: str) -> Callable[[F], F]:
    """`--max-windows N` (shown) and the deprecated `--windows N` (hidden); read both with `_max_windows`."""

    def decorate(f: F) -> F:
        f = click.option("--windows", "old_windows", type=click.IntRange(min=minimum), default=None, hidden=True,
                         help="Deprecated: the old name of --max-windows")(f)
        return click.option("--max-windows", "max_windows", type=click.IntRange(min=minimum), default=default,
                            show_default=True, help=help_text)(f)

    return decorate


def _max_windows(ctx: click.Context, max_windows: int, old: int | None) -> int:
    given = ctx.get_parameter_source("max_windows") not in (None, ParameterSource.DEFAULT)
    value, warning = windows_spelling(max_windows, given, old)
    if warning:
        click.echo(warning, err=True)
    return value


def _spelling(name: str, sources: Sequence[str] = ()) -> tuple[str, tuple[str, ...]]:
    pipeline, chosen, warning = source_spelling(name, sources)
    if warning:
        click.echo(warning, err=True)
    return pipeline, chosen


# ------------------------------------------------------------------------------------------ opening


def _unit(ctx: click.Context, name: str, source: str | None, any_source: bool = False) -> tuple[Any, str | None]:
    """(pipeline config, source id) for a command about one source (`--source`); a group pipeline without one
    is refused, naming its sources (`any_source`: the first serves, for what is the pipeline's whichever source
    asks: its lease, its maintenance)."""
    pipeline, chosen = _spelling(name, (source,) if source else ())
    cfg = _load(ctx.obj["config"]).pipeline(pipeline)
    source = chosen[0] if chosen else None
    if source is None and cfg.is_group and any_source:
        source = cfg.source_ids()[0]
    if source is None and cfg.is_group:
        ids = [str(s) for s in cfg.source_ids()]
        raise click.UsageError(
            f"pipeline {pipeline!r} is a group pipeline: say which source with --source (its sources: "
            f"{', '.join(ids)}), e.g. `cdc {ctx.info_name} {pipeline} --source {ids[0]}`"
        )
    cfg.source_config(source)  # an unknown source: ConfigError naming the pipeline's sources
    return cfg, source


@contextmanager
def _pipeline(ctx: click.Context, name: str, source: str | None = None, any_source: bool = False) -> Iterator[Any]:
    """One source of a pipeline (the pipeline itself when it has one source)."""
    from cdc_core.run.pipeline import Pipeline

    cfg, source = _unit(ctx, name, source, any_source)
    p = Pipeline.from_config(cfg, source_params_for(cfg, source), source_id=source)
    try:
        yield p
    finally:
        p.close()


@contextmanager
def _group(ctx: click.Context, name: str, sources: tuple[str, ...] = ()) -> Iterator[Any]:
    """Every source of a pipeline (or those named), under one ZooKeeper client (cdc_core.run.group)."""
    from cdc_core.run.group import PipelineGroup

    pipeline, chosen = _spelling(name, sources)
    cfg = _load(ctx.obj["config"]).pipeline(pipeline)
    g = PipelineGroup.open(cfg, lambda s: source_params_for(cfg, s), sources=list(chosen) or None)
    try:
        yield g
    finally:
        g.close()


@contextmanager
def _coordinator(ctx: click.Context, name: str) -> Iterator[Any]:
    """The pipeline's ZooKeeper state alone (its lease is the pipeline's, whatever its sources): no source
    connection, so it works while a source is down or its credentials are not at hand."""
    from cdc_core.coordination import PipelineCoordinator
    from cdc_core.run.pipeline import zk_client_for

    pipeline, _ = _spelling(name)
    cfg = _load(ctx.obj["config"]).pipeline(pipeline)
    client = zk_client_for(cfg)
    coordinator = PipelineCoordinator(client, cfg.zookeeper.root, cfg.name)
    try:
        yield coordinator
    finally:
        coordinator.close()
        client.stop()
        client.close()


def _holder(kind: str) -> str:
    """`cli/<command>/<host>/<pid>` plus the process start time (`/<ticks>`), so a later process that
    reuses the PID is another holder (it never re-enters a dead one's lease)."""
    from cdc_core.model.holders import this_process

    me = this_process()
    return f"cli/{kind}/{me.host}/{me.pid}" + (f"/{me.start_ticks}" if me.start_ticks is not None else "")


def _acquire(p: Any, kind: str) -> Any:
    """The CLI's lease: its process identity recorded, a dead holder on this host broken (cdc_core.model.holders)."""
    from cdc_core.model.holders import this_process

    return p.acquire(_holder(kind), process=this_process(), break_dead=True)


def _emit(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))


@click.group()
@click.option(
    "--config",
    "config",
    envvar="CDC_CONFIG",
    default=None,
    metavar="FILE",
    help="Pipelines file (default: $CDC_CONFIG, else config/pipelines.yaml in the current directory)",
)
@click.option("-v", "--verbose", is_flag=True, help="Debug logs")
@click.pass_context
def cli(ctx: click.Context, config: str | None, verbose: bool) -> None:
    """Batch CDC from MySQL/MariaDB binlogs into Delta Lake, exactly once."""
    from cdc_core.run.pipeline import configure_logging

    configure_logging(logging.DEBUG if verbose else logging.INFO)
    ctx.obj = {"config": config}


@cli.command()
@click.option("--check-sources", is_flag=True,
              help="Also connect to every source: its identity and captured tables, and where each table lands")
@click.pass_context
def validate(ctx: click.Context, check_sources: bool) -> None:
    """Validate the configuration file and print the resolved pipelines and their routes.

    Refuses two pipelines that can land the same table under the same lake root (one writer per Delta table:
    cdc_core.model.lake_writers), a route whose target a table could also reach unrouted, and two sources of
    one group pipeline on the same server (the same connection, or the same host:port). A route that takes
    no captured table is a warning offline (when literal includes tell), an error with --check-sources, which
    describes the captured tables as a run would and prints where each lands. Without --check-sources nothing
    but the environment's connections is read (no network)."""
    from cdc_core.model import validation
    from cdc_core.model.lake_writers import overlaps, route_clashes
    from cdc_core.run.validate import configured_servers, read_sources

    cfg = _load(ctx.obj["config"])
    found: list[str] = [o.message() for o in overlaps(cfg.pipelines)]
    for p in cfg.pipelines:
        sources = f" sources={[s for s in p.source_ids()]}" if p.is_group else ""
        click.echo(f"ok: pipeline {p.name!r} schedule={p.schedule!r} tables={list(p.tables.include)}{sources}")
        routes = p.route_list()
        for line in validation.route_lines(routes):
            click.echo(f"  {line}")
        found += [c.message() for c in route_clashes(p)]
        if not check_sources:
            found += validation.shared_servers(p.name, configured_servers(p))
            for i in validation.routes_missing_literal_includes(routes, p.tables.include, p.tables.exclude) or ():
                click.echo(f"warning: {validation.idle_route_message(p.name, routes[i], i, 'included table')}",
                           err=True)
            continue
        views = read_sources(p, functools.partial(source_params_for, p))
        found += validation.shared_servers(p.name, [v.server for v in views])
        for v in views:
            for landing in validation.landings(routes, v.server.source, v.tables):
                click.echo(f"  {landing.line()}")
        captured = {t for v in views for t in v.tables}
        found += [validation.idle_route_message(p.name, routes[i], i, "table captured on the source(s)")
                  for i in validation.idle_routes(routes, captured)]
    if found:
        for message in found:
            click.echo(f"error: {message}", err=True)
        raise ConfigError(f"{cfg.path}: {len(found)} problem(s), listed above")


DEFAULT_MAX_WINDOWS = 100


def run_failure(result: WindowsRun | GroupRun) -> BaseException | None:
    """What a run's exit says (a pipeline's `WindowsRun`, or a group pipeline's `GroupRun`): None when every
    source landed; the first error itself when no source landed (a total failure keeps its own exit code); a
    `PartialFailure` (exit 9) when some sources failed and the others landed."""
    from cdc_core.run.group import GroupRun, SourceFailed

    if not isinstance(result, GroupRun) or result.first_error is None:
        return None
    failed = list(result.failed)
    landed = [s for s in result.sources if s not in failed]
    if not landed:
        return result.first_error
    pipeline = result.pipeline

    def error(s: str) -> str:
        outcome = result.sources.get(s)
        return outcome.error if isinstance(outcome, SourceFailed) else "?"

    errors = "; ".join(f"{s}: {error(s)}" for s in failed)
    return PartialFailure(
        f"pipeline {pipeline!r}: {len(failed)} of {len(result.sources)} sources failed ({errors}); "
        f"{', '.join(landed)} landed their windows. The next run retries the failed sources "
        f"(`cdc run {pipeline} --source {failed[0]}` for one alone); `cdc status {pipeline}` shows their last errors"
    )


@cli.command()
@click.argument("pipeline")
@max_windows_option(DEFAULT_MAX_WINDOWS, 1, "At most this many windows in this run (per source)")
@click.option(
    "--once", is_flag=True, help="Land one window and stop (the old default; the same as --max-windows 1)"
)
@click.option("--source", "sources", multiple=True, metavar="ID",
              help="A group pipeline: only this source (repeatable)")
@click.pass_context
def run(  # noqa: PLR0917 (click passes options as arguments)
    ctx: click.Context, pipeline: str, max_windows: int, old_windows: int | None, once: bool,
    sources: tuple[str, ...],
) -> None:
    """Land what is waiting: lease, then plan, stage, merge (spark-submit), ack window after window until
    caught up, then release.

    Caught up means a window reached the source's binlog end seen when the run started (changes
    arriving meanwhile wait for the next run), or a window was empty; a backfill or a snapshot in
    progress keeps the run going. Never more than --max-windows windows. A lease held by a `cdc`
    process on this host that no longer exists (killed, OOM, reboot) is broken and taken, with a
    `lease.dead_holder` log line; a live holder, or one on another host or an Airflow task, makes the
    run skip (exit 75).

    A group pipeline lands each source's windows in turn under its one lease; a failing source (its
    server down, say) is reported and the others go on. The exit code is then 9 when other sources
    landed (a partial failure), else the first failure's.
    """
    from cdc_core.model.holders import this_process

    max_windows = _max_windows(ctx, max_windows, old_windows)
    with _group(ctx, pipeline, sources) as g:
        result = g.run_cycle(
            _holder("run"), max_windows=1 if once else max_windows, until_caught_up=True,
            process=this_process(), break_dead=True,
        )
    failure = run_failure(result)
    _emit(result.to_dict())
    if failure is not None:
        raise failure


@cli.command()
@click.argument("pipeline", required=False)
@click.option("--source", "sources", multiple=True, metavar="ID",
              help="A group pipeline: only this source (repeatable)")
@click.pass_context
def status(ctx: click.Context, pipeline: str | None, sources: tuple[str, ...]) -> None:
    """Cursor, lag, lease and recent windows (the monitoring page's data), as JSON; every pipeline without
    PIPELINE."""
    from cdc_core.run.status import group_status

    if sources and not pipeline:
        raise click.UsageError("--source needs the PIPELINE it belongs to")
    cfg = _load(ctx.obj["config"])
    names = [pipeline] if pipeline else [p.name for p in cfg.pipelines]
    out = []
    for name in names:
        with _group(ctx, name, sources) as g:
            out.append(group_status(g))
    _emit(out if not pipeline else out[0])


@cli.command()
@click.argument("pipeline")
@click.option("--source", default=None, metavar="ID", help="A group pipeline: which source")
@click.pass_context
def resolve(ctx: click.Context, pipeline: str, source: str | None) -> None:
    """Print the position the next window would start from, and the rule that chose it."""
    with _pipeline(ctx, pipeline, source) as p:
        cursor = p.coordinator.read_cursor()
        r = p.resolve(cursor.position)
        _emit({"position": r.position.to_dict(), "label": r.position.label(), "rule": r.rule, "detail": r.detail})


@cli.command()
@click.argument("pipeline")
@click.option("--from", "start_ts", default=None, help="UTC timestamp, e.g. 2026-11-20T08:00:00Z (unless --cancel)")
@click.option("--until", "end_ts", default=None, help="Optional UTC end timestamp (default: the current cursor)")
@click.option("--table", "tables", multiple=True, help="Limit to these schema.table names (repeatable)")
@click.option("--dry-run", is_flag=True, help="Only report the resolved positions and the number of changes")
@max_windows_option(100, 0, "At most this many backfill windows in this run; 0: only start the backfill (the "
                            "next runs land it)")
@click.option("--cancel", is_flag=True, help="Stop the active backfill (what it replayed stays; the stream goes on)")
@click.option("--source", default=None, metavar="ID",
              help="A group pipeline: only this source (default: each source in turn)")
@click.pass_context
def backfill(  # noqa: PLR0917 (click passes options as arguments)
    ctx: click.Context,
    pipeline: str,
    start_ts: str | None,
    end_ts: str | None,
    tables: tuple[str, ...],
    dry_run: bool,
    max_windows: int,
    old_windows: int | None,
    cancel: bool,
    source: str | None,
) -> None:
    """Replay the binlog from a timestamp (repairs damaged tables; the cursor never moves backward).

    A group pipeline replays each source from the same instant, on its own binlog (or only --source)."""
    max_windows = _max_windows(ctx, max_windows, old_windows)
    name, chosen = _spelling(pipeline, (source,) if source else ())
    cfg = _load(ctx.obj["config"]).pipeline(name)
    if cfg.is_group and not chosen:
        reports = {}
        for sid in cfg.source_ids():
            reports[sid] = _backfill_one(ctx, name, sid, start_ts, end_ts, tables, dry_run, max_windows, cancel)
        _emit({"pipeline": name, "sources": reports})
        return
    _emit(_backfill_one(ctx, name, chosen[0] if chosen else None, start_ts, end_ts, tables, dry_run, max_windows,
                        cancel))


def _backfill_one(  # noqa: PLR0917 (the command's options)
    ctx: click.Context,
    pipeline: str,
    source: str | None,
    start_ts: str | None,
    end_ts: str | None,
    tables: tuple[str, ...],
    dry_run: bool,
    max_windows: int,
    cancel: bool,
) -> dict[str, Any]:
    from cdc_core.run import backfill as backfill_steps
    from cdc_core.run import loop

    if cancel:
        if start_ts or end_ts or tables or dry_run:
            raise click.UsageError("--cancel takes no --from, --until, --table or --dry-run")
        with _pipeline(ctx, pipeline, source) as p:
            grant = _acquire(p, "backfill")
            try:
                land = f"`cdc run {command_target(unit_name(pipeline, source))} --once` lands it"
                cancelled = backfill_steps.cancel_backfill(p, grant, how_to_land=land)
            finally:
                p.release(grant)
        return dict(cancelled)
    if not start_ts:
        raise click.UsageError("--from is required (or --cancel)")
    with _pipeline(ctx, pipeline, source) as p:
        # Bad input fails here, before the lease: nothing in ZooKeeper, staging or the lake changes.
        backfill_steps.check_backfill(p, start_ts, end_ts, list(tables) or None, dry_run=dry_run)
        grant = _acquire(p, "backfill")
        try:
            report = backfill_steps.begin_backfill(p, grant, start_ts, end_ts, list(tables) or None, dry_run=dry_run)
            if not dry_run:
                done = loop.run_windows(p, grant, grant.holder, max_windows=max_windows, stop=loop.backfill_done(p))
                report["windows"] = [w.planned.to_dict() for w in done.windows]
        finally:
            p.release(grant)
        return dict(report)


@cli.group()
def lease() -> None:
    """Show or break a pipeline's lease (one per pipeline, whatever its sources)."""


@lease.command("show")
@click.argument("pipeline")
@click.pass_context
def show_lease(ctx: click.Context, pipeline: str) -> None:
    """The lease record as JSON: holder, fencing token, expiry (`lease: null` when nobody holds it).

    Reads ZooKeeper only: no source connection is needed."""
    with _coordinator(ctx, pipeline) as c:
        info = c.read_lease()
        _emit({"pipeline": c.pipeline, "lease": info.to_dict() if info else None})


@lease.command("break")
@click.argument("pipeline")
@click.option("--holder", required=True,
              help="The holder shown by `cdc lease show` or `cdc status` (the run known to be dead)")
@click.pass_context
def break_lease(ctx: click.Context, pipeline: str, holder: str) -> None:
    """Remove a live lease of a run known to be dead, so the next run need not wait for its expiry.

    Safe even if the run is alive after all: it is fenced and can change nothing any more.
    """
    with _coordinator(ctx, pipeline) as c:
        info = c.break_lease(holder)
        _emit({"pipeline": c.pipeline, "broken": info.to_dict()})


@cli.command()
@click.argument("pipeline")
@click.option(
    "--table", "tables", multiple=True, help="schema.table to (re-)load (repeatable); default: every captured table"
)
@click.option(
    "--chunk-rows", type=click.IntRange(min=1), default=None, help="Rows per chunk (default: snapshot.chunk_rows)"
)
@max_windows_option(1000, 0, "At most this many windows now (chunks, with stream windows in between); 0: only "
                             "request (the next runs load it)")
@click.option("--cancel", is_flag=True, help="Stop loading --table (default: every table not done); loaded rows stay")
@click.option("--source", default=None, metavar="ID", help="A group pipeline: which source's tables to load")
@click.pass_context
def snapshot(  # noqa: PLR0917 - one parameter per CLI option
    ctx: click.Context, pipeline: str, tables: tuple[str, ...], chunk_rows: int | None, max_windows: int,
    old_windows: int | None, cancel: bool, source: str | None,
) -> None:
    """Load existing rows of tables (initial load, a table added later, a rebuild), chunk by chunk, without locks."""
    from cdc_core.model import snapshot_state
    from cdc_core.run import loop, snapshot_steps

    max_windows = _max_windows(ctx, max_windows, old_windows)
    with _pipeline(ctx, pipeline, source) as p:
        grant = _acquire(p, "snapshot")
        try:
            try:
                if cancel:
                    snapshot_steps.cancel(p, grant, list(tables) or None)
                else:
                    snapshot_steps.request(p, grant, list(tables) or None, chunk_rows, requested_by=grant.holder)
            except Exception as e:
                p.note_failure("begin_snapshot", e, holder=grant.holder)  # for the monitor page, as the loop does
                raise
            done = loop.run_windows(p, grant, grant.holder, max_windows=max_windows, stop=loop.snapshot_done(p))
        finally:
            p.release(grant)
        progress = snapshot_state.progress_view(p.coordinator.read_snapshot())
        who = {"pipeline": p.config.name, **({"source": p.source_id} if p.source_id else {})}
        _emit({**who, "windows": [w.planned.to_dict() for w in done.windows], "snapshot": progress})


@cli.command()
@click.argument("pipeline")
@click.option(
    "--wait",
    "wait_seconds",
    type=float,
    default=None,
    help="Seconds to wait for a running pipeline run's lease (default: maintenance.lease_wait_seconds)",
)
@click.option("--no-tables", is_flag=True, help="Only clean staged windows and ZooKeeper records (no Spark)")
@click.option("--skip-optimize", is_flag=True, help="Do not compact the Delta tables")
@click.option("--skip-vacuum", is_flag=True, help="Do not VACUUM the Delta tables")
@click.pass_context
def maintain(  # noqa: PLR0917 - one parameter per click option
    ctx: click.Context,
    pipeline: str,
    wait_seconds: float | None,
    no_tables: bool,
    skip_optimize: bool,
    skip_vacuum: bool,
) -> None:
    """Housekeeping without Airflow: staged windows, ZooKeeper records, Delta OPTIMIZE/VACUUM/log (as the
    cdc_<name>_maintenance DAG does; see docs/housekeeping.md)."""
    from cdc_core.run.housekeeping import MaintenanceRun

    # A group pipeline's tables are the pipeline's (its lake filter), under its one lease: any source serves.
    with _pipeline(ctx, pipeline, any_source=True) as p:
        run = MaintenanceRun(
            p,
            _holder("maintain"),
            wait_seconds=wait_seconds,
            optimize=not skip_optimize,
            vacuum=not skip_vacuum,
            tables=not no_tables,
        )
        _emit(run.run())


@cli.command("merge-server")
@click.argument("pipeline")
@click.option("--listen", default=None,
              help="host:port to listen on (default: the pipeline's spark.merge_server.address)")
@click.option("--ping", "ping_only", is_flag=True, help="Only ask the running server for its status")
@click.pass_context
def merge_server(ctx: click.Context, pipeline: str, listen: str | None, ping_only: bool) -> None:
    """Run the warm merge option's server in the foreground: one long-running Spark application that merges the
    windows `cdc run` sends it (spark.merge_server in the config, or CDC_MERGE_SERVER=host:port), with the
    pipeline's Spark master, jars, confs and credentials. SIGTERM / Ctrl-C stop it cleanly (the merge in
    flight finishes first); killed any other way, the next `cdc run` replays the window (docs/performance.md)."""
    import os

    from cdc_core.lake import merge_client

    with _pipeline(ctx, pipeline, any_source=True) as p:
        address = listen or (p.config.spark.merge_server.address if p.config.spark.merge_server else None)
        if not address:
            raise ConfigError(
                f"pipeline {p.pipeline_name!r} has no spark.merge_server.address: give --listen host:port"
            )
        if ping_only:
            _emit(merge_client.ping(address))
            return
        argv, env = p.merge_server_launch(address)
    click.echo(f"merge server for pipeline {p.pipeline_name!r} starting on {address} (Spark session first)", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(argv[0], argv, env)  # noqa: S606 (the server is this process from here on: signals reach it directly)


@cli.command()
@click.argument("pipeline")
@click.option("--source", default=None, metavar="ID", help="A group pipeline: which source")
@click.pass_context
def verify(ctx: click.Context, pipeline: str, source: str | None) -> None:
    """Compare every captured table with its Delta table, value for value (run when the source is quiet).

    A table a transform rule shapes is compared with its source rows shaped by the same rule. A group
    pipeline: one source at a time (--source), on that source's rows of each table."""
    from cdc_core.run.verify import verify_pipeline

    with _pipeline(ctx, pipeline, source) as p:
        diffs = verify_pipeline(p)
        include = list(p.config.tables.include)
    if not diffs:
        click.echo(f"no captured tables: nothing to compare (tables.include {include})")
    for d in diffs:
        click.echo(d.summary())
    if not all(d.equal for d in diffs):
        raise click.ClickException("the lake differs from the source (see above)")


@cli.command()
@click.argument("pipeline")
@click.option("--window", type=int, default=None, help="The cut of this window (seq) instead of the newest")
@click.option("--as-of", "as_of", default=None,
              help="The newest cut whose changes were all committed at or before this UTC time (2026-11-20T08:00:00Z)")
@click.option("--table", "tables", multiple=True, help="Only these schema.table names (repeatable)")
@click.option("--sql", "as_sql", is_flag=True, help="Print the SELECT ... VERSION AS OF statements instead of JSON")
@click.option("--check", is_flag=True, help="Also open every table at its version (fails if the log was cleaned up)")
@click.option("--source", default=None, metavar="ID",
              help="A group pipeline: which source's cuts (each source has its own)")
@click.pass_context
def versions(  # noqa: PLR0917 - one parameter per click option
    ctx: click.Context, pipeline: str, window: int | None, as_of: str | None, tables: tuple[str, ...],
    as_sql: bool, check: bool, source: str | None,
) -> None:
    """A consistent cut: the Delta version of every table of the pipeline (and of each one's history and
    change log, under `outputs`) as of one acked window.

    Reads only the lake (<lake_root>/_cdc.meta/<pipeline>/checkpoints): no ZooKeeper, no source.
    """
    from cdc_core.lake import lake_versions, object_store
    from cdc_core.model.config import parse_utc_timestamp

    cfg, source = _unit(ctx, pipeline, source)  # a group pipeline's cuts are per source
    unit = unit_name(cfg.name, source)
    storage = object_store.Storage(object_store.for_pipeline(cfg))  # the lake may be on s3://
    at = parse_utc_timestamp(as_of, what="--as-of") if as_of is not None else None
    cut = lake_versions.load_cut(str(cfg.lake_root), unit, window=window, as_of=at, storage=storage)
    if check:
        for t in cut.with_outputs(tables):
            lake_versions.check_version(cut, t.name, output=t.output, storage=storage)
    if as_sql:
        click.echo(f"-- pipeline {unit}, window {cut.seq}, cursor {cut.cursor}, commits up to "
                   f"{cut.to_dict()['commit_at']}")
        for line in cut.sql(tables):
            click.echo(line)
        return
    out = cut.to_dict()
    out["tables"] = cut.tables_dict(tables)
    _emit(out)


def main(argv: list[str] | None = None) -> int:
    try:
        cli.main(args=argv, standalone_mode=False)
    except LeaseHeld as e:
        click.echo(f"skipped: {e}", err=True)
        return e.exit_code
    except CdcError as e:
        click.echo(f"error: {type(e).__name__}: {e}", err=True)
        return e.exit_code
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
