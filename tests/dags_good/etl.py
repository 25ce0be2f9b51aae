from common import DEFAULT_ARGS, TABLES  # helper module in the same folder

from engine.dag import DAG, BashTask, PythonTask

with DAG("etl", schedule="*/10 * * * *", start_date="2026-01-01", catchup=False,
         max_active_runs=2, max_active_tasks=8, tags=["demo"]):
    extract = BashTask("extract", bash_command="./extract.sh", priority_weight=10, **DEFAULT_ARGS)
    load = PythonTask("load", python_callable="etl.jobs:load", op_kwargs={"table": "t"},
                      max_active_tis_per_dag=4)
    shard = PythonTask("shard", python_callable="etl.jobs:shard").expand(table=TABLES)
    extract >> [load, shard]
