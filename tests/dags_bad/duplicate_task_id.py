from engine.dag import DAG, BashTask

with DAG("dup_tasks"):
    BashTask("a", bash_command="true")
    BashTask("a", bash_command="false")
