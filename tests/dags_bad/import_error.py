import no_such_module_for_engine_tests  # noqa: F401

from engine.dag import DAG

DAG("never_reached")
