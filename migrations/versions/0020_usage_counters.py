"""Usage counters (issue 11; docs/critical-section.md, "Usage counters"):

- tables used_pool, used_run, used_task, used_task_run, used_executor: what the TIs that hold
  capacity use, per partition (a row only while something is used), and usage_delta: the
  append-only changes not folded into them yet;
- triggers on task_instance (INSERT, UPDATE, DELETE; PostgreSQL also TRUNCATE) and on pool
  (include_deferred) append to usage_delta through track_usage_v1 / track_pool_usage_v1 (both
  dialects): every change, by any client, is counted in the transaction that makes it;
- fold_usage_v1 folds usage_delta into the counters under the queue_tis lock; recount_usage_v1
  appends corrections where the view usage_drift (counters vs a recount of task_instance)
  shows a difference (`engine db check` reports it, `engine db check --repair` calls it); the
  counters are filled by it here;
- queue_tis_v6: PostgreSQL reads the counters instead of every active TI, and commits without
  waiting for its WAL flush; MySQL/MariaDB calls queue_tis_v4 then folds. The named query
  `queue_tis` calls v6; v1..v5 stay installed.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

from engine.procedures import install, remove

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

ID = sa.String(250).with_variant(sa.Text(), "postgresql")
KIND = sa.String(20).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
NEW = ["track_usage_v1", "track_pool_usage_v1", "fold_usage_v1", "usage_drift", "recount_usage_v1", "queue_tis_v6"]


def CAP() -> sa.Column:
    """The partition's limit when its counter was last folded: a hint that lets queue_tis_v6 find
    the full partitions without joining every counter to its limit (it confirms each)."""
    return sa.Column("cap", sa.Integer, nullable=True)


COUNTERS = {
    "used_pool": [sa.Column("pool", ID, primary_key=True), sa.Column("slots", sa.Integer, nullable=False)],
    # (dag_id beside a run's id: what reads a run's counter finds its DAG's limits without the run.)
    "used_run": [sa.Column("dag_run_id", sa.BigInteger, primary_key=True, autoincrement=False),
                 sa.Column("dag_id", ID, nullable=False), sa.Column("n", sa.Integer, nullable=False), CAP()],
    "used_task": [sa.Column("dag_id", ID, primary_key=True), sa.Column("task_id", ID, primary_key=True),
                  sa.Column("n", sa.Integer, nullable=False), CAP()],
    "used_task_run": [sa.Column("dag_run_id", sa.BigInteger, primary_key=True, autoincrement=False),
                      sa.Column("task_id", ID, primary_key=True), sa.Column("dag_id", ID, nullable=False),
                      sa.Column("n", sa.Integer, nullable=False), CAP()],
    "used_executor": [sa.Column("executor", ID, primary_key=True), sa.Column("n", sa.Integer, nullable=False), CAP()],
}
TI_ROW = "{0}.state, {0}.dag_run_id, {0}.dag_id, {0}.task_id, {0}.pool, {0}.executor, {0}.pool_slots"
NULL_ROW = "NULL, NULL, NULL, NULL, NULL, NULL, NULL"
MYSQL_TRIGGERS = {
    "usage_ti_insert": ("AFTER INSERT ON task_instance", f"CALL track_usage_v1({NULL_ROW}, {TI_ROW.format('NEW')})"),
    "usage_ti_update": ("AFTER UPDATE ON task_instance",
                        f"CALL track_usage_v1({TI_ROW.format('OLD')}, {TI_ROW.format('NEW')})"),
    "usage_ti_delete": ("AFTER DELETE ON task_instance", f"CALL track_usage_v1({TI_ROW.format('OLD')}, {NULL_ROW})"),
    "usage_pool_insert": ("AFTER INSERT ON pool", "CALL track_pool_usage_v1(NULL, NULL, NEW.name, NEW.include_deferred)"),
    "usage_pool_update": ("AFTER UPDATE ON pool",
                          "CALL track_pool_usage_v1(OLD.name, OLD.include_deferred, NEW.name, NEW.include_deferred)"),
    "usage_pool_delete": ("AFTER DELETE ON pool", "CALL track_pool_usage_v1(OLD.name, OLD.include_deferred, NULL, NULL)"),
}
PG_TRIGGERS = {
    "usage_ti_insert": "AFTER INSERT ON task_instance REFERENCING NEW TABLE AS new_tis FOR EACH STATEMENT "
                       "EXECUTE FUNCTION track_usage_v1()",
    "usage_ti_update": "AFTER UPDATE ON task_instance REFERENCING OLD TABLE AS old_tis NEW TABLE AS new_tis "
                       "FOR EACH STATEMENT EXECUTE FUNCTION track_usage_v1()",
    "usage_ti_delete": "AFTER DELETE ON task_instance REFERENCING OLD TABLE AS old_tis FOR EACH STATEMENT "
                       "EXECUTE FUNCTION track_usage_v1()",
    "usage_ti_truncate": "AFTER TRUNCATE ON task_instance FOR EACH STATEMENT EXECUTE FUNCTION track_usage_v1()",
    "usage_pool": "AFTER INSERT OR UPDATE OR DELETE ON pool FOR EACH ROW EXECUTE FUNCTION track_pool_usage_v1()",
}


def is_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade():
    for name, columns in COUNTERS.items():
        op.create_table(name, *columns, **MYSQL_TABLE)
    op.create_table(
        "usage_delta",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("kind", KIND, nullable=True),  # NULL: every kind of counter; else a correction of that kind
        sa.Column("dag_run_id", sa.BigInteger, nullable=True),
        sa.Column("dag_id", ID, nullable=True),
        sa.Column("task_id", ID, nullable=True),
        sa.Column("pool", ID, nullable=True),
        sa.Column("executor", ID, nullable=True),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        **MYSQL_TABLE,
    )
    if is_postgresql():
        # A queue (rows appended by every change, deleted by every fold): vacuumed after every
        # 1,000 dead rows, not after 20% of a table that is nearly empty between folds.
        op.execute("ALTER TABLE usage_delta SET (autovacuum_vacuum_scale_factor = 0, "
                   "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0, "
                   "autovacuum_vacuum_insert_threshold = 1000)")
    install(op, NEW, revision)
    # The triggers, then the counters filled by a recount (one statement: what commits after it
    # is counted by the triggers on top of it). Upgrade with the services stopped, as always.
    if is_postgresql():
        for name, definition in PG_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {definition}")
        op.execute("SELECT recount_usage_v1()")
    else:
        for name, (when, body) in MYSQL_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} FOR EACH ROW {body}")
        op.execute("CALL recount_usage_v1(@engine_recounted)")


def downgrade():
    if is_postgresql():
        for name, definition in PG_TRIGGERS.items():
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {definition.split(' ON ')[1].split()[0]}")
    else:
        for name in MYSQL_TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    remove(op, NEW)
    op.drop_table("usage_delta")
    for name in reversed(list(COUNTERS)):
        op.drop_table(name)
