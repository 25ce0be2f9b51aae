"""Alembic environment. The engine builds its Alembic Config in code (engine.migrate);
the connection to use arrives in ``config.attributes['connection']``."""
from alembic import context

config = context.config
connection = config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, transaction_per_migration=True)
with context.begin_transaction():
    context.run_migrations()
