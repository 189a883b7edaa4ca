"""The Optuna storage of `mltcp tune`: an RDB storage (SQLite file, PostgreSQL, MySQL) that rides out
a database that goes away for a while.

Every storage call is one transaction. When the server is unreachable (restarted, a network cut)
the call fails with a connection error before anything is committed, so it is simply made again,
after 0.5, 1, 2, 4 then every 5 s, for up to ``RETRY_S`` seconds: workers pause during the outage
and go on where they were, with the running trials intact. Pooled connections are checked before
use (``pool_pre_ping``), so the ones a restart killed are replaced instead of failing a call.
Past ``RETRY_S`` the error goes up; the trial running then stays RUNNING until Optuna's heartbeat
(``HEARTBEAT_S``) goes stale for ``GRACE_S`` and the next worker's trial marks it failed.
"""

from __future__ import annotations

import functools
import time
import warnings

import optuna

HEARTBEAT_S, GRACE_S = 20, 60  # a worker that vanished has its trial failed after GRACE_S
RETRY_S = 120.0
CONNECT_TIMEOUT_S = 10

# the backend methods Optuna's storage layer calls (its cache calls some private ones)
_CALLS = (
    "check_trial_is_updatable",
    "create_new_study",
    "create_new_trial",
    "delete_study",
    "get_all_studies",
    "get_all_trials",
    "get_best_trial",
    "get_n_trials",
    "get_study_directions",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_system_attrs",
    "get_study_user_attrs",
    "get_trial",
    "get_trial_id_from_study_id_trial_number",
    "get_trial_number_from_id",
    "get_trial_param",
    "get_trial_params",
    "get_trial_system_attrs",
    "get_trial_user_attrs",
    "set_study_system_attr",
    "set_study_user_attr",
    "set_trial_intermediate_value",
    "set_trial_param",
    "set_trial_state_values",
    "set_trial_system_attr",
    "set_trial_user_attr",
    "record_heartbeat",
    "_create_new_trial",
    "_set_trial_param",
    "_get_best_trial_id",
    "_get_trials",
    "_get_stale_trial_ids",
)


_OUTAGE_WORDS = (
    "server closed the connection",
    "terminating connection",
    "connection refused",
    "could not connect",
    "connection already closed",
    "the database system is",
    "connection to server",
    "ssl syscall",
    "broken pipe",
    "connection reset",
    "timeout expired",
    "lost connection",
    "gone away",
)


def is_connection_error(e: BaseException) -> bool:
    """A lost or refused database connection (not a bad query or a constraint)."""
    from sqlalchemy import exc

    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, exc.DBAPIError) and e.connection_invalidated:
            return True
        if isinstance(e, (exc.OperationalError, exc.InterfaceError, exc.PendingRollbackError, exc.DisconnectionError)):
            return "database is locked" not in str(e)  # SQLite's lock timeout is not an outage
        if any(w in str(e).lower() for w in _OUTAGE_WORDS) and type(e).__module__.split(".")[0] in (
            "psycopg2",
            "psycopg",
            "sqlalchemy",
            "optuna",
            "pymysql",
            "MySQLdb",
        ):
            return True
        e = e.__cause__ or e.__context__
    return False


def retry_while_unreachable(call, notify, on_retry=lambda: None):
    """``call()``, made again while it fails for a lost or refused connection, for up to RETRY_S."""
    deadline, wait, told = time.monotonic() + RETRY_S, 0.5, False
    while True:
        try:
            result = call()
            if told:
                notify("database reachable again; going on")
            return result
        except Exception as e:
            if not is_connection_error(e) or time.monotonic() + wait > deadline:
                raise
            if not told:
                notify(
                    f"database unreachable ({type(e.__cause__ or e).__name__}: "
                    f"{str(e.__cause__ or e).strip().splitlines()[0][:160]}); retrying for up to {RETRY_S:.0f} s"
                )
                told = True
            try:
                on_retry()
            except Exception:
                pass
            time.sleep(wait)
            wait = min(5.0, wait * 2)


def _retrying(fn, notify):
    @functools.wraps(fn)
    def call(self, *args, **kwargs):
        # on a retry, drop the session bound to the dead connection
        return retry_while_unreachable(lambda: fn(self, *args, **kwargs), notify, self.remove_session)

    return call


def _notify(msg: str) -> None:
    from .console import err

    err.print(f"{time.strftime('%H:%M:%S')} {msg}", highlight=False, soft_wrap=True)


class RetryingRDBStorage(optuna.storages.RDBStorage):
    """RDBStorage whose calls are retried while the database is unreachable (module docstring)."""


for _name in _CALLS:
    if hasattr(optuna.storages.RDBStorage, _name):
        setattr(RetryingRDBStorage, _name, _retrying(getattr(optuna.storages.RDBStorage, _name), _notify))


def open_storage(url: str, retry: bool = False) -> RetryingRDBStorage:
    """The storage at ``url``; raises whatever SQLAlchemy or the driver raise if it cannot open.
    ``retry``: a server that is unreachable is tried again as a storage call is (a worker joining a
    study its parent already opened); without it, it fails at once (a mistyped URL)."""
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    if url.startswith("sqlite"):
        kw = {"connect_args": {"timeout": 60}}
    else:
        kw = {"pool_pre_ping": True}
        if url.startswith("postgresql"):
            kw["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
            if url.split(":", 1)[0] in ("postgresql", "postgresql+psycopg2"):
                try:
                    import psycopg2  # noqa: F401  (SQLAlchemy's default PostgreSQL driver)
                except ImportError:
                    raise ImportError("PostgreSQL needs the psycopg2 driver: pip install 'mltcp[tune]'") from None

    def make() -> RetryingRDBStorage:
        return RetryingRDBStorage(url, engine_kwargs=kw, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)

    return retry_while_unreachable(make, _notify) if retry else make()
