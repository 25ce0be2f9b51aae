-- The revision Alembic recorded (`engine tick` compares it with the newest revision file
-- before it runs without Alembic: engine/migrate.py head_fast).
SELECT version_num FROM alembic_version
