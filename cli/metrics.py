"""`engine metrics`: the metrics the database knows, printed once (for cron users)."""
from __future__ import annotations

import json

import click

from cli.common import Context, handle_errors, pass_ctx


@click.command("metrics")
@click.option("--json", "as_json", is_flag=True, help="one JSON object per sample instead of Prometheus' text format")
@pass_ctx
@handle_errors
def metrics_cmd(c: Context, as_json):
    """Print the metrics the database knows once (Prometheus text format), for cron users."""
    from engine import metrics

    if not as_json:
        click.echo(metrics.text_once(c.engine()), nl=False)
        return
    for r in metrics.database_samples(c.engine()):
        labels = {k: getattr(r, k) for k in metrics.LABELS if getattr(r, k) is not None}
        click.echo(json.dumps({"metric": metrics.PREFIX + r.metric, "labels": labels, "value": float(r.value or 0)}))
