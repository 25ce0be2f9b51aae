"""A task that fails once and succeeds when retried, and a skip that propagates."""
from engine import DAG, BashTask, PythonTask

with DAG("demo_retries", schedule=None):
    flaky = PythonTask("flaky", python_callable="demo_tasks:flaky", retries=2, retry_delay=1)
    maybe = BashTask("maybe", bash_command="echo nothing to do today; exit 99")  # 99: skipped
    after_skip = BashTask("after_skip", bash_command="echo never runs")  # all_success: skipped too
    cleanup = BashTask("cleanup", bash_command="echo cleanup", trigger_rule="none_failed")
    flaky >> maybe >> after_skip >> cleanup
