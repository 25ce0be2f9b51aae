"""`engine events ...`: events that EventTrigger waits for."""
from __future__ import annotations

import json

import click

from cli.common import Context, handle_errors, pass_ctx
from engine import db, validate
from engine.errors import EngineError


@click.group()
def events():
    """Events that EventTrigger waits for."""


@events.command("send")
@click.argument("key")
@click.option("--payload", help="JSON value the resumed tasks receive as the event (default null)")
@pass_ctx
@handle_errors
def events_send(c: Context, key, payload):
    """Fire every EventTrigger waiting for KEY now (events are not stored)."""
    validate.check_text(key, "event key", allow_empty=False)
    if len(key) > validate.MAX_ID_LENGTH:
        raise EngineError(f"event key is {len(key)} characters long; use at most {validate.MAX_ID_LENGTH}")
    parsed = validate.parse_json(payload, "--payload", "e.g. '{\"rows\": 10}' or '\"done\"'") if payload is not None else None
    cfg = c.cfg()
    with db.connect(c.engine()) as conn:
        n = db.run(conn, "send_event", key=key, payload=json.dumps(parsed), now=None,
                   boost=cfg.resume_priority_boost).scalar_one()
    click.echo(f"event {key}: {n} deferred TI(s) resumed")
