"""A pipeline over all its sources: one `Pipeline` per source (cdc_core.model.sources), one lease, one run.

A single-source pipeline is a group of one (its unit is the pipeline itself), so the CLI and the DAGs use
this for both forms. A run takes the pipeline's lease once, then lands each source's windows in turn under
that grant. A source that fails (its server stopped, a purged binlog, a schema conflict) is recorded as
that source's last error and does not stop the others: the run goes on with the next source and reports
every source's outcome; it fails (exit code of the first failure) only after every source had its turn.
Losing the lease (Fenced) stops the whole run at once: nothing of any source may change after that.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cdc_core.capture.source import SourceParams
from cdc_core.model import holders
from cdc_core.model.config import PipelineConfig
from cdc_core.model.errors import CdcError, ConfigError, Fenced
from cdc_core.model.logfmt import kv, one_line
from cdc_core.run import loop, pipeline
from cdc_core.run.loop import WindowsRun
from cdc_core.run.pipeline import Pipeline

log = logging.getLogger("cdc.pipeline")


@dataclass(frozen=True)
class SourceFailed:
    """A source of a group pipeline whose turn failed: its error in one line (`Type: message`)."""

    error: str

    def to_dict(self) -> dict[str, Any]:
        return {"error": self.error}


@dataclass(frozen=True)
class GroupRun:
    """A group pipeline's run: each source's outcome in turn order, the failed sources, and the first
    failure itself (its exit code is the run's when no source landed; cdc_core.cli.run_failure)."""

    pipeline: str
    sources: Mapping[str, WindowsRun | SourceFailed]
    failed: tuple[str, ...] = ()
    first_error: Exception | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The run as `cdc run` prints it (the error objects stay out: their text is each source's)."""
        return {"pipeline": self.pipeline, "sources": {s: r.to_dict() for s, r in self.sources.items()},
                "failed": list(self.failed)}


@dataclass
class PipelineGroup:
    """Every source of one configured pipeline, sharing one ZooKeeper client and one lease."""

    config: PipelineConfig
    units: dict[str | None, Pipeline]
    _client: Any = field(default=None, repr=False)
    _owns_client: bool = False

    @classmethod
    def open(
        cls,
        config: PipelineConfig,
        params_for: Callable[[str | None], SourceParams],
        *,
        sources: list[str] | None = None,
        zk_client: Any = None,
        **kwargs: Any,
    ) -> PipelineGroup:
        """`params_for(source_id)`: that source's connection. `sources`: only these (default: all).
        `kwargs` go to every `Pipeline.from_config`."""
        ids = config.source_ids()
        chosen = sources if sources else ids
        unknown = [s for s in chosen if s not in ids]
        if unknown:
            config.source_config(unknown[0])  # raises, naming the pipeline's sources
        owns = zk_client is None
        if owns:
            zk_client = pipeline.zk_client_for(config, *([kwargs["zk_digest"]] if "zk_digest" in kwargs else []))
        units: dict[str | None, Pipeline] = {}
        try:
            for sid in chosen:
                units[sid] = Pipeline.from_config(config, params_for(sid), zk_client, source_id=sid, **kwargs)
        except BaseException:
            for u in units.values():
                u.close()
            if owns:
                zk_client.stop()
                zk_client.close()
            raise
        return cls(config=config, units=units, _client=zk_client, _owns_client=owns)

    def close(self) -> None:
        for u in self.units.values():
            u.close()
        if self._owns_client and self._client is not None:
            self._client.stop()
            self._client.close()
            self._client = None

    def __enter__(self) -> PipelineGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def first(self) -> Pipeline:
        """Any unit: the lease is the pipeline's, so every unit acquires, renews and releases the same one."""
        return next(iter(self.units.values()))

    def unit(self, source: str | None) -> Pipeline:
        if source not in self.units:
            self.config.source_config(source)  # names the pipeline's sources when unknown
            raise ConfigError(f"pipeline {self.name!r}: source {source!r} is not open in this run")
        return self.units[source]

    def run_cycle(
        self,
        holder: str,
        *,
        max_windows: int = 1,
        until_caught_up: bool = False,
        process: holders.ProcessIdentity | None = None,
        break_dead: bool = False,
        merge: loop.Merge | None = None,
    ) -> WindowsRun | GroupRun:
        """acquire -> each source's windows (`Pipeline.run_windows`) -> release.

        A single-source pipeline returns exactly `Pipeline.run_cycle`'s result. A group pipeline returns a
        `GroupRun` (each source's result or its failure); the caller decides the exit (the CLI: the first
        failure's exit code, after printing every source's outcome)."""
        if max_windows < 1:
            raise ConfigError(f"pipeline {self.name!r}: max windows must be at least 1, got {max_windows}")
        if not self.config.is_group:
            return self.first.run_cycle(
                holder, max_windows=max_windows, until_caught_up=until_caught_up, process=process,
                break_dead=break_dead, merge=merge,
            )
        grant = self.first.acquire(holder, process=process, break_dead=break_dead)
        results: dict[str, WindowsRun | SourceFailed] = {}
        failed: list[tuple[str, Exception]] = []
        try:
            for sid, unit in self.units.items():
                assert sid is not None
                try:
                    results[sid] = unit.run_windows(
                        grant, holder, max_windows=max_windows, merge=merge, until_caught_up=until_caught_up
                    )
                except Fenced:
                    raise  # the lease is gone: no source may change anything more
                except Exception as e:  # this source fails; the others still get their turn
                    results[sid] = SourceFailed(f"{type(e).__name__}: {one_line(e)}")
                    failed.append((sid, e))
                    log.warning("%s", kv(event="source.failed", pipeline=self.name, source=sid,
                                         error=one_line(e)[:300], action="next_source"))
        finally:
            self.first.release(grant)
        return GroupRun(self.name, results, tuple(s for s, _ in failed), failed[0][1] if failed else None)

    def for_each(self, action: Callable[[Pipeline], Any]) -> dict[str, Any]:
        """`action(unit)` per source; a failing source's entry is `{"error": ...}` (status pages)."""
        out: dict[str, Any] = {}
        for sid, unit in self.units.items():
            try:
                out[str(sid)] = action(unit)
            except CdcError as e:
                out[str(sid)] = {"error": f"{type(e).__name__}: {one_line(e)}"}
        return out
