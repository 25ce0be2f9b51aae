"""Extract with the shell, transform three shards in parallel, load in a small pool."""
from engine import DAG, BashTask, PythonTask

with DAG("demo_etl", schedule=None, max_active_tasks=4, description="extract, map over shards, load"):
    extract = BashTask("extract", bash_command="echo extracting; sleep 0.3", priority_weight=5)
    transform = PythonTask("transform", python_callable="demo_tasks:transform",
                           op_kwargs={"factor": 2}).expand(shard=[1, 2, 3])
    load = BashTask("load", bash_command="echo loading", pool="demo_warehouse", pool_slots=2)
    report = PythonTask("report", python_callable="demo_tasks:report", trigger_rule="all_done")
    extract >> transform >> load >> report
