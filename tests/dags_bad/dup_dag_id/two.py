from engine.dag import DAG

DAG("same_id")
