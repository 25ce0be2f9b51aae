# DAGs created in a loop and never bound to a module global are still collected.
from engine.dag import DAG, BashTask


def make(n):
    dag = DAG(f"generated_{n}")
    BashTask("hello", bash_command=f"echo {n}", dag=dag)


for i in range(2):
    make(i)
