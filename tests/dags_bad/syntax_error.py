from engine.dag import DAG

with DAG("broken_syntax")
    pass
