from engine.dag import DAG, BashTask

with DAG("cyclic"):
    a = BashTask("a", bash_command="true")
    b = BashTask("b", bash_command="true")
    c = BashTask("c", bash_command="true")
    a >> b >> c >> a
