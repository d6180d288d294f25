"""The results location: where every host of a run writes its Parquet results, a folder or any fsspec URL.

Under the location a run keeps the layout of a local run folder (tasks.core.runinfo.RunPaths):
`<run_id>/results/<table>/<part>.parquet` and `<run_id>/logs/`. A variant's flow run measures
into its host's own run folder, then publishes the files named after its variant; the nightly
fetches the whole run before it validates and loads it. When the location is the local runs
folder itself (the default on one machine), publishing and fetching have nothing to copy.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import fsspec
from fsspec.implementations.local import LocalFileSystem

from tasks.core.credentials import results_url_problem
from tasks.core.errors import ConfigError
from tasks.core.names import contained, is_under, local_url_path
from tasks.core.runinfo import RunPaths, runs_dir


class ResultsLocationError(ConfigError):
    """A results location that cannot be used; the message is one line."""


@dataclass(frozen=True)
class ResultsLocation:
    url: str

    @classmethod
    def resolve(cls, url: str | None) -> "ResultsLocation":
        """`url` (a folder or fsspec URL), or the local runs folder, as an absolute URL."""
        if not url:
            return cls(runs_dir().resolve().as_uri())
        if problem := results_url_problem(url):  # checked before the URL is printed anywhere
            raise ResultsLocationError(f"results_url: {problem}")
        try:
            local = local_url_path(url)  # plain paths and file:// name a local folder; checked like one
        except ValueError as err:
            raise ResultsLocationError(str(err)) from None
        if local is not None:
            return cls(local.resolve().as_uri())
        return cls(url.rstrip("/"))

    def _fs(self) -> tuple[fsspec.AbstractFileSystem, str]:
        fs, root = fsspec.core.url_to_fs(self.url)
        return fs, root.rstrip("/")

    def _run_root(self, run_id: str) -> tuple[fsspec.AbstractFileSystem, str]:
        """The run's folder at the location; a local one must resolve under the location's folder.

        `run_id` is a RunPaths' run id: checked where it became a path (make_run_paths), or a rebuild's listing's
        name matched against the run id pattern."""
        fs, root = self._fs()
        if isinstance(fs, LocalFileSystem):
            try:
                contained(root, f"{root}/{run_id}", "results_url run folder")
            except ValueError as err:
                raise ResultsLocationError(str(err)) from None
        return fs, f"{root}/{run_id}"

    def is_local_runs_dir(self, paths: RunPaths) -> bool:
        """True when the location's run folder is `paths.root` itself: nothing to copy."""
        fs, root = self._run_root(paths.run_id)
        return isinstance(fs, LocalFileSystem) and Path(root).resolve() == paths.root.resolve()

    def check_writable(self) -> None:
        """Write and delete a probe file at the location; raise one line when that fails."""
        fs, root = self._fs()
        probe = f"{root}/.probe-{secrets.token_hex(4)}"
        try:
            fs.makedirs(root, exist_ok=True)
            with fs.open(probe, "wb") as f:
                f.write(b"tradeoff")
            fs.rm(probe)
        except Exception as err:  # noqa: BLE001 - any backend's error: say where and why in one line
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ResultsLocationError(
                f"scale_out.results_url: cannot write to {self.url} ({type(err).__name__}: {reason}); "
                f"give a folder or URL every host can write, or fix its permissions"
            ) from None

    def publish(self, paths: RunPaths, variant: str) -> int:
        """Copy the variant's files (its result parts, its logs) from the local run folder; returns the count.

        The `variants` part goes last: a variant row in the location means all its parts are there.
        """
        if self.is_local_runs_dir(paths):
            return 0
        fs, root = self._run_root(paths.run_id)
        files = sorted(variant_files(paths, variant), key=lambda p: p.parent.name == "variants")
        for local in files:
            remote = f"{root}/{local.relative_to(paths.root).as_posix()}"
            fs.makedirs(remote.rsplit("/", 1)[0], exist_ok=True)
            fs.put_file(str(local), remote)
        return len(files)

    def fetch(self, paths: RunPaths, variant: str | None = None) -> int:
        """Copy the run's files (or only one variant's result parts) from the location into the local run folder."""
        if self.is_local_runs_dir(paths):
            return 0
        fs, root = self._run_root(paths.run_id)
        if not fs.exists(root):
            return 0
        names = [n for n in fs.find(root) if not n.rsplit("/", 1)[-1].startswith(".")]
        if variant is not None:
            names = [n for n in names if n.endswith(f"/{variant}.parquet") and "/results/" in n]
        for remote in names:
            local = paths.root / remote[len(root) + 1 :]
            if not is_under(paths.root, local):  # a name from the location ('../x'): never written outside the run
                raise ResultsLocationError(f"results_url: file {remote} would land outside {paths.root}; refusing it")
            local.parent.mkdir(parents=True, exist_ok=True)
            fs.get_file(remote, str(local))
        return len(names)

    def clear(self, paths: RunPaths, variant: str, keep: tuple[str, ...] = ()) -> None:
        """Delete the variant's result parts here and in the location, so a re-measure starts from nothing; the
        tables in `keep` stay (a perf sweep measured in the nightly's interleaved rounds, PERF_TABLES)."""
        for local in variant_files(paths, variant, logs=False):
            if is_under(paths.root, local) and local.parent.name not in keep:  # a symlinked table folder: not ours
                local.unlink(missing_ok=True)
        if self.is_local_runs_dir(paths):
            return
        fs, root = self._run_root(paths.run_id)
        if fs.exists(f"{root}/results"):
            for remote in fs.find(f"{root}/results"):
                if (
                    remote.endswith(f"/{variant}.parquet")
                    and remote.rsplit("/", 2)[-2] not in keep
                    and (not isinstance(fs, LocalFileSystem) or is_under(root, remote))
                ):
                    fs.rm(remote)


# The tables a perf sweep writes (the engine's own metrics sampled alongside it): what a variant measured in the
# nightly's interleaved rounds keeps when its own flow then starts (flows.variant).
PERF_TABLES = ("perf_requests", "perf_power", "perf_summary", "engine_metrics")


def variant_files(paths: RunPaths, variant: str, logs: bool = True) -> list[Path]:
    """The files of one variant in a local run folder: `results/*/<variant>.parquet` and `logs/<variant>.server.log`."""
    files = list(paths.results.glob(f"*/{variant}.parquet"))
    log = paths.logs / f"{variant}.server.log"
    if logs and log.is_file():
        files.append(log)
    return files
