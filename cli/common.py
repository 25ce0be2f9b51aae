"""What every command module shares: the context (settings, database), one-line errors, id
checks, and printing a result as a table."""
from __future__ import annotations

import functools
import json
import sys
from datetime import datetime, timezone

import click

from engine import db, logs, validate
from engine.config import load_config
from engine.errors import EngineError
from engine.table import table


class Context:
    def __init__(self, database_url: str | None, config_path: str | None):
        self.overrides = {"database_url": database_url}
        self.config_path = config_path
        self._cfg = None
        self._eng = None
        self._url = None

    def cfg(self, **more):
        if more:
            self.overrides.update({k: v for k, v in more.items() if v is not None})
            self._cfg = None
        if self._cfg is None:
            self._cfg = load_config(self.overrides, self.config_path)
            logs.apply_config(self._cfg)
        return self._cfg

    def engine(self, migrated: bool = True, light: bool = False):
        """The database engine; with `migrated`, the schema must be at head. The embedded
        database is migrated on first use so a newcomer needs no set-up. `light`: for a command
        that only calls named statements (`engine tick`), an engine.lite engine when the schema
        is at head and the URL is a plain one, so neither SQLAlchemy nor Alembic is imported;
        anything else (an old schema, an odd URL, an error) takes the usual path below, which
        says what is wrong exactly as before."""
        if self._eng is None and light and migrated:
            self._eng = self._light_engine()
        if self._eng is None:
            import sqlalchemy as sa

            from engine import calls, migrate

            cfg = self.cfg()
            self._eng = db.make_engine(self.url(), schema=cfg.schema or None)
            if migrated:
                try:
                    current = migrate.current(self._eng)
                except sa.exc.OperationalError as exc:
                    raise db.describe_connect_error(self._eng.url.render_as_string(hide_password=False), exc) from None
                migrate.check_known(current)
                if current != migrate.head():
                    if not cfg.database_url:
                        migrate.upgrade(self._eng)
                    else:
                        raise EngineError(f"database schema is at {current or 'nothing'}, not {migrate.head()}; "
                                          f"run `engine db upgrade`")
                # The versions of the procedures this service calls (setting procedure_versions).
                self._eng = calls.pin(self._eng, cfg.procedure_versions)
        return self._eng

    def url(self) -> str:
        """The database URL (starting the embedded database when none is configured)."""
        if self._url is None:
            self._url = db.resolve_url(self.cfg())
        return self._url

    def _light_engine(self):
        from engine import calls, lite, migrate

        cfg = self.cfg()
        eng = lite.open(self.url(), schema=cfg.schema or None)
        if eng is None:
            return None
        try:
            with db.connect(eng) as conn:
                current = db.run(conn, "schema_revision").scalar()
            if current is None or current != migrate.head_fast():
                eng.dispose()
                return None
            return calls.pin(eng, cfg.procedure_versions)
        except (EngineError, *db.dbapi_errors()):
            eng.dispose()
            return None

    def close(self) -> None:
        if self._eng is not None:
            self._eng.dispose()
            self._eng = None


def _one_line(exc: BaseException) -> str:
    # PostgreSQL: the primary message; MySQL/MariaDB (PyMySQL): the message of (code, message).
    return db.error_message(exc)


def handle_errors(fn):
    """Bad input and unreachable databases end in one line on stderr and exit code 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except EngineError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(1)
        except db.dbapi_errors() as exc:
            if db.is_transient(exc):
                # A deadlock or a lock wait timeout: the database is fine, another transaction
                # was in the way. The command's transaction ends rolled back (by the server, or,
                # after MariaDB's 1205, which undoes only the statement, by the connection's
                # `begin()` block the error left).
                click.echo(f"error: {_one_line(exc)}: another transaction was in the way and this "
                           f"command's transaction was rolled back; run the command again", err=True)
            elif db.is_timeout(exc):
                click.echo(f"error: {_one_line(exc)}: the statement took longer than its time limit; raise the "
                           f"limit or run the command again when the database is less busy", err=True)
            elif db.is_missing_database(exc):
                # (`engine db upgrade` on PostgreSQL: MySQL/MariaDB's is created before it connects.)
                click.echo(f"error: {_one_line(exc)}; {db.CREATE_DATABASE}", err=True)
            elif isinstance(exc, db.operational_errors()) and not db.is_user_error(exc):
                # PyMySQL reports a stored routine's SIGNAL SQLSTATE '45000' (error 1644) and a
                # failed CHECK constraint (MariaDB 4025) as an OperationalError too: that is bad
                # input, shown like any other DBAPIError.
                click.echo(f"error: database error: {_one_line(exc)}; check that the database is up "
                           f"and ENGINE_DATABASE_URL is right", err=True)
            else:
                click.echo(f"error: {_one_line(exc)}", err=True)
            sys.exit(1)
        except UnicodeEncodeError as exc:
            # The driver met text it cannot send, e.g. a lone surrogate that stands for a byte
            # of an argument, file name or environment value that was not UTF-8.
            bad = exc.object[exc.start:exc.end]
            click.echo(f"error: text holds {bad!r}, which cannot be encoded ({exc.reason}); use valid UTF-8 "
                       f"in the arguments, file names and values given", err=True)
            sys.exit(1)
    return wrapper


pass_ctx = click.make_pass_decorator(Context)


class Seconds(click.ParamType):
    """Seconds: a finite number in (0, hi] (click.FloatRange lets NaN through)."""
    name = "seconds"

    def __init__(self, hi: float):
        self.hi = hi

    def convert(self, value, param, ctx):
        try:
            return validate.check_seconds(float(value), "seconds", allow_zero=False, hi=self.hi)
        except (TypeError, ValueError, EngineError):
            self.fail(f"{value!r} is not a number of seconds more than 0 and at most {self.hi:g}", param, ctx)


def checked(what: str, run_id: bool = False):
    """A click callback: the argument must be a valid id (validate.check_id)."""
    def callback(ctx, param, value):
        if value is None:
            return None
        try:
            return validate.check_id(value, what, run_id=run_id)
        except EngineError as exc:
            raise click.BadParameter(str(exc)) from None
    return callback


def show(result, empty: str = "(none)") -> None:
    rows = result.all()
    click.echo(table(rows, list(result.keys())) if rows else empty)


class OneLineGroup(click.Group):
    """Usage errors (a bad option value, a missing argument) as one line on stderr, exit 1,
    like every other error of the command line (one line naming the thing and the fix)."""

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        try:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except click.ClickException as exc:
            names, ctx = [], getattr(exc, "ctx", None)
            while ctx is not None and ctx.parent is not None:
                names.append(ctx.info_name)
                ctx = ctx.parent
            command = " ".join(["engine", *reversed(names)])
            hint = f"; see `{command} --help`" if isinstance(exc, click.UsageError) else ""
            click.echo(f"error: {' '.join(exc.format_message().split()).rstrip('.')}{hint}", err=True)
            sys.exit(1)


class Date(click.ParamType):
    """An ISO 8601 date or date-time (`2026-01-01`, `2026-01-01T06:00`, `...+02:00`); without
    an offset it is UTC. Within engine/validate.py's MIN_DATE..MAX_DATE."""
    name = "date"

    def convert(self, value, param, ctx):
        if isinstance(value, datetime):
            return value
        try:
            parsed = datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not a date; use ISO 8601, e.g. 2026-01-01 or 2026-01-01T06:00:00+00:00", param, ctx)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        try:
            utc = parsed.astimezone(timezone.utc)
        except OverflowError:  # an offset that takes it past year 1 or 9999: out of range either way
            utc = parsed
        try:
            return validate.check_date(utc, param.opts[0] if param else "date")
        except EngineError as exc:
            self.fail(str(exc), param, ctx)


def plain(value):
    if isinstance(value, float):
        return round(value, 1)
    return value


def emit(result, as_json: bool, empty: str = "(none)") -> list:
    """Print a query result as a table (durations to 0.1 s) or, with as_json, as a JSON list of
    objects (dates in ISO 8601); returns the rows."""
    keys, rows = list(result.keys()), result.all()
    if as_json:
        click.echo(json.dumps([dict(zip(keys, r)) for r in rows], default=json_default, indent=2))
    else:
        click.echo(table([[plain(v) for v in r] for r in rows], keys) if rows else empty)
    return rows


def json_default(value):
    return value.isoformat() if isinstance(value, datetime) else str(value)
