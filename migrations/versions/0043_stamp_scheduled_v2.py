"""MySQL/MariaDB: a writer learns whether its pool has a skip entry from the pool's gate row, read
under the gate's lock (stamp_scheduled_v2), not from queue_skip with the writer statement's read
view (v1). A statement that read a table before it wrote a scheduled TI had opened its view before
it waited for the gate of a call making an entry, so v1 missed the entry the call committed, the TI
got no queue_skip_log row, and the entry hid it (docs/critical-section.md, "stamp_scheduled_v2").

- column queue_skip_gate.has_entry (the pool has a skip entry; set for every entry, possibly
  left set a while after its entry is dropped);
- triggers queue_skip_made (AFTER INSERT ON queue_skip: sets the flag; the call making an entry
  holds the gate row then) and queue_skip_dropped (AFTER DELETE ON queue_skip: clears it when the
  gate row can be locked without waiting, FOR UPDATE SKIP LOCKED; a writer holding it keeps it set);
- procedure stamp_scheduled_v2, and the triggers stamp_scheduled_insert / stamp_scheduled_update
  calling it, made again under LOCK TABLES task_instance WRITE (no TI is written without them);
- the skip entries made before are dropped (one may hide a TI; queue_tis_v18 makes them again,
  reading each pool in full once). The flag triggers exist before the entries are dropped, so an
  entry a running scheduler makes meanwhile has its flag.

PostgreSQL: nothing (its entries compare transaction ids; its writers take no lock). Downgrade:
the triggers call stamp_scheduled_v1 again; the flag triggers, the column and v2 go.

Revision ID: 0043
Revises: 0042
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0043"
down_revision = "0042"
branch_labels = None
depends_on = None

NEW = ["stamp_scheduled_v2"]
# No comments inside bodies: engine/dbtriggers.py folds a body's whitespace onto one line.
FLAG_TRIGGERS = {
    "queue_skip_made": (
        "CREATE TRIGGER queue_skip_made AFTER INSERT ON queue_skip FOR EACH ROW "
        "INSERT INTO queue_skip_gate (pool, has_entry) VALUES (NEW.pool, TRUE) ON DUPLICATE KEY UPDATE has_entry = TRUE"),
    "queue_skip_dropped": (
        "CREATE TRIGGER queue_skip_dropped AFTER DELETE ON queue_skip FOR EACH ROW BEGIN "
        "DECLARE v_free INT; "
        "SELECT COUNT(*) INTO v_free FROM queue_skip_gate g WHERE g.pool = OLD.pool FOR UPDATE SKIP LOCKED; "
        "IF v_free > 0 THEN UPDATE queue_skip_gate SET has_entry = FALSE WHERE pool = OLD.pool; END IF; END"),
}
STAMP = ("CREATE TRIGGER {name} AFTER {event} ON task_instance FOR EACH ROW FOLLOWS {after} "
         "BEGIN IF NEW.state = 'scheduled' THEN CALL stamp_scheduled_v{v}(NEW.id, NEW.pool); END IF; END")
STAMPS = {"stamp_scheduled_insert": ("INSERT", "usage_ti_insert"), "stamp_scheduled_update": ("UPDATE", "usage_ti_update")}


def swap_stamps(version: int) -> None:
    """The stamp triggers made again, calling stamp_scheduled_v<version>, while task_instance is
    write-locked (no TI is written without its trigger; DDL commits on its own in MySQL)."""
    op.execute("LOCK TABLES task_instance WRITE")
    try:
        for name, (event, after) in STAMPS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
            op.execute(STAMP.format(name=name, event=event, after=after, v=version))
    finally:
        op.execute("UNLOCK TABLES")


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    op.execute("ALTER TABLE queue_skip_gate ADD COLUMN has_entry BOOLEAN NOT NULL DEFAULT FALSE")
    for definition in FLAG_TRIGGERS.values():
        op.execute(definition)
    op.execute("DELETE FROM queue_skip_part")
    op.execute("DELETE FROM queue_skip")
    install(op, NEW, revision)
    swap_stamps(2)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    swap_stamps(1)
    remove(op, NEW)
    for name in FLAG_TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("ALTER TABLE queue_skip_gate DROP COLUMN has_entry")
