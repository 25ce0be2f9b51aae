"""Python callables of the sample DAGs (imported by the worker from this folder)."""
import os
import time


def transform(shard: int, factor: int = 1) -> None:
    time.sleep(0.2)
    print(f"transformed shard {shard} x{factor}")


def flaky() -> None:
    """Fails on the first try, succeeds on the retry."""
    if int(os.environ["ENGINE_TRY_NUMBER"]) < 2:
        raise RuntimeError("first try fails on purpose; the retry will succeed")
    print("second try worked")


def report() -> None:
    print("run conf:", os.environ.get("ENGINE_CONF"))
