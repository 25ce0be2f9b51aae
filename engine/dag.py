"""DAG authoring API: DAG, BashTask, PythonTask, dependencies, expand, serialization.

Everything here is pure Python; the database layer stores what `serialize_dag` returns.
"""
from __future__ import annotations

import contextlib
import heapq
import re
from datetime import date, datetime, timezone
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from engine import timezones, validate
from engine.errors import EngineError

_CALLABLE_RE = re.compile(r"[\w.]+:\w+")
TRIGGER_RULES = ("all_success", "all_failed", "all_done", "one_success", "one_failed",
                 "none_failed", "none_skipped", "always")
WEIGHT_RULES = ("downstream", "upstream", "absolute")
PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
           "@weekly": "0 0 * * 0", "@monthly": "0 0 1 * *", "@yearly": "0 0 1 1 *",
           "@annually": "0 0 1 1 *"}
_NAMES = [{}, {}, {},
          {m: i + 1 for i, m in enumerate("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split())},
          {d: i for i, d in enumerate("SUN MON TUE WED THU FRI SAT".split())}]
_BOUNDS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]  # minute hour day-of-month month day-of-week

_context: list[DAG] = []             # `with DAG(...)` stack: tasks attach to the innermost DAG
_captured: list[DAG] | None = None   # set by capture_dags() while the loader imports a file


@contextlib.contextmanager
def capture_dags():
    """Collect every DAG created inside the block (used by engine.dagbag)."""
    global _captured
    saved, saved_ctx, _captured = _captured, list(_context), []
    try:
        yield _captured
    finally:
        _captured = saved
        _context[:] = saved_ctx


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_id(kind: str, value, where: str = "") -> str:
    return validate.check_id(value, kind, where)


def _seconds(value, what: str, where: str, *, allow_none: bool, allow_zero: bool):
    """Seconds as float from int/float/timedelta: finite, within [0, MAX_SECONDS]."""
    if value is None and allow_none:
        return None
    return validate.check_seconds(value, what, where, allow_zero=allow_zero)


def _limit(value, what: str, where: str):
    if value is not None and (not _is_int(value) or value < 1 or value > validate.INT32_MAX):
        raise EngineError(f"{where}{what} must be None or an integer from 1 to {validate.INT32_MAX}, got {value!r}")
    return value


# A task's JSON values are stored inside dag.serialized too, below the DAG, its task list and the
# task: op_kwargs 3 levels down, an expand() list 4 (MariaDB refuses documents nested deeper than
# validate.MAX_JSON_DEPTH, so the whole DAG must fit).
OP_KWARGS_DEPTH = validate.MAX_JSON_DEPTH - 3
EXPAND_DEPTH = validate.MAX_JSON_DEPTH - 4


def _json(value, what: str, where: str, max_depth: int):
    return validate.check_json(value, what, where, max_depth=max_depth)


def normalise_schedule(schedule, dag_id: str = "?") -> str | None:
    """None, a preset or a 5-field cron -> 5-field numeric cron (or None)."""
    if schedule is None:
        return None
    where = f"dag '{dag_id}': "
    fix = "use 5 fields of numbers, *, ',', '-', '/' (JAN-DEC, SUN-SAT allowed) or a preset like @daily"
    if not isinstance(schedule, str):
        raise EngineError(f"{where}schedule must be None or a cron string, got {schedule!r}; {fix}")
    expr = schedule.strip()
    if expr.startswith("@"):
        if expr.lower() == "@once":
            raise EngineError(f"{where}schedule '@once' is not supported; use schedule=None and trigger the DAG manually")
        if expr.lower() not in PRESETS:
            raise EngineError(f"{where}unknown schedule preset {expr!r}; use one of {', '.join(PRESETS)}")
        return PRESETS[expr.lower()]

    def bad(why):
        return EngineError(f"{where}bad schedule {schedule!r} ({why}); {fix}")

    fields = expr.split()
    if len(fields) != 5:
        raise bad(f"needs exactly 5 fields, got {len(fields)}")
    out = []
    for i, field in enumerate(fields):
        def name(m, i=i):
            if m.group(0).upper() not in _NAMES[i]:
                raise bad(f"{m.group(0)!r} is not allowed in field {i + 1}")
            return str(_NAMES[i][m.group(0).upper()])
        field = re.sub(r"[A-Za-z]+", name, field)  # L, W and unknown names are rejected here
        lo_b, hi_b = _BOUNDS[i]
        items, values, has7 = [], set(), False
        for item in field.split(","):
            m = re.fullmatch(r"(\*|(\d+)(?:-(\d+))?)(?:/(\d+))?", item)  # rejects '#', '?', empty items
            if not m:
                raise bad(f"cannot parse {item!r} in field {i + 1}")
            default_hi = 6 if i == 4 else hi_b  # '*' in day-of-week means 0-6
            lo = int(m.group(2)) if m.group(2) else lo_b
            hi = int(m.group(3)) if m.group(3) else (default_hi if m.group(4) or not m.group(2) else lo)
            step = int(m.group(4) or 1)
            if not (lo_b <= lo <= hi <= hi_b) or step < 1:
                raise bad(f"{item!r} out of range {lo_b}-{hi_b} or reversed in field {i + 1}")
            if m.group(2) and m.group(4) and not m.group(3):
                item = f"{lo}-{hi}/{step}"  # 'a/s' -> explicit 'a-max/s'
            items.append(item)
            values.update(range(lo, hi + 1, step))
            has7 = has7 or hi == 7
        if i == 4 and has7:  # day-of-week 7 is Sunday: rewrite the field as an explicit 0-6 list
            items = [str(v) for v in sorted({v % 7 for v in values})]
        out.append(",".join(dict.fromkeys(items)))  # '*,*' -> '*', as croniter reads it
    cron = " ".join(out)
    if not croniter.is_valid(cron):
        raise bad("rejected by croniter")
    # Day-of-month and day-of-week combine with OR when both are restricted. Write '*' exactly
    # where croniter (Airflow's cron) reads a field as unrestricted, so the database's simple
    # rule (OR unless a field is '*') gives croniter's schedule.
    try:  # croniter searches some years ahead: Feb 30 never comes
        croniter(cron, datetime(2000, 1, 1)).get_next(datetime)
    except CroniterBadDateError:
        raise bad("it never fires") from None
    expanded = croniter(cron).expanded
    for i in (2, 4):
        if expanded[i][0] == "*":  # croniter tests the first element
            out[i] = "*"
    return " ".join(out)


def normalise_start_date(value, dag_id: str = "?", zone: str = "UTC") -> str | None:
    """str/date/datetime -> ISO-8601 UTC string; naive values are wall-clock times of `zone`
    (the DAG's timezone; a time a DST change skips is read with the offset before it)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip())
        except ValueError:
            raise EngineError(f"dag '{dag_id}': bad start_date {value!r}; use an ISO date like '2026-01-01'") from None
    if isinstance(value, date) and not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if not isinstance(value, datetime):
        raise EngineError(f"dag '{dag_id}': start_date must be a str, date or datetime, got {value!r}")
    if value.tzinfo is None:
        value = value.replace(tzinfo=ZoneInfo(zone))
    value = value.astimezone(timezone.utc)
    return validate.check_date(value, "start_date", f"dag '{dag_id}'").isoformat()


class DAG:
    def __init__(self, dag_id, schedule=None, start_date=None, catchup=False, max_active_runs=16,
                 max_active_tasks=16, description="", is_paused_upon_creation=None, tags=(), timezone="UTC"):
        self.dag_id = _check_id("dag_id", dag_id)
        where = f"dag '{dag_id}': "
        self.schedule = normalise_schedule(schedule, dag_id)
        self.timezone = timezones.check_zone(timezone, where)  # the zone the cron and a naive start_date are read in
        self.start_date = normalise_start_date(start_date, dag_id, self.timezone)
        if self.schedule is not None and self.start_date is None:
            raise EngineError(f"{where}start_date is required when schedule is set; add start_date='2026-01-01'")
        self.catchup = bool(catchup)
        self.max_active_runs = _limit(max_active_runs, "max_active_runs", where)
        self.max_active_tasks = _limit(max_active_tasks, "max_active_tasks", where)
        if not isinstance(description, str):
            raise EngineError(f"{where}description must be a string")
        self.description = validate.check_text(description, "description", where)
        # None: the setting dags_are_paused_at_creation decides when the DAG is first synced.
        self.is_paused_upon_creation = None if is_paused_upon_creation is None else bool(is_paused_upon_creation)
        if isinstance(tags, str) or not isinstance(tags, (list, tuple, set)) or not all(isinstance(t, str) for t in tags):
            raise EngineError(f"{where}tags must be a list of strings, got {tags!r}")
        self.tags = [validate.check_text(t, "a tag", where, allow_empty=False) for t in tags]
        self.tasks: dict[str, Task] = {}
        self.fileloc: str | None = None
        if _captured is not None:
            _captured.append(self)

    def __enter__(self):
        _context.append(self)
        return self

    def __exit__(self, *exc):
        if _context and _context[-1] is self:
            _context.pop()
        return False

    def __repr__(self):
        return f"<DAG {self.dag_id}>"

    def add_task(self, task: Task):
        if task.task_id in self.tasks:
            raise EngineError(f"dag '{self.dag_id}': duplicate task_id '{task.task_id}'; give each task a unique task_id")
        self.tasks[task.task_id] = task
        task.dag = self


OUTPUT_KEY = "__task_output__"  # how a reference to a task's output is stored in op_kwargs / expand


class TaskOutput:
    """`task.output`: the result of `task` in the same dag run, for another task of its DAG:
    a value of `op_kwargs` (the whole result) or of `.expand()` (one TI per item of a list).
    Using it adds `task` upstream, as Airflow's XComArg does. Stored as {OUTPUT_KEY: task_id};
    the worker resolves it when it starts the try (task_inputs_v1)."""

    def __init__(self, task: "Task"):
        self.task = task

    def __repr__(self):
        return f"{self.task.task_id}.output"

    def to_json(self) -> dict:
        return {OUTPUT_KEY: self.task.task_id}


class Task:
    kind = ""
    bash_command = env = python_callable = op_kwargs = None  # set by the subclass that uses them

    def __init__(self, task_id, *, dag=None, pool="default_pool", pool_slots=1, priority_weight=1,
                 weight_rule="downstream", queue="default", retries=0, retry_delay=300,
                 retry_exponential_backoff=False, max_retry_delay=None, execution_timeout=None,
                 trigger_rule="all_success", max_active_tis_per_dag=None, max_active_tis_per_dagrun=None,
                 executor="default", preemptible=False):
        dag = dag if dag is not None else (_context[-1] if _context else None)
        if not isinstance(dag, DAG):
            raise EngineError(f"task {task_id!r} is created outside a DAG; put it inside `with DAG(...):` or pass dag=")
        self.task_id = _check_id("task_id", task_id, f"dag '{dag.dag_id}': ")
        w = self.where = f"dag '{dag.dag_id}' task '{task_id}': "
        for what, value in (("pool", pool), ("queue", queue), ("executor", executor)):
            validate.check_id(value, what, w)
        validate.check_int(pool_slots, "pool_slots", w, lo=1, hi=validate.MAX_SLOTS)
        validate.check_int(priority_weight, "priority_weight", w, lo=-validate.MAX_PRIORITY, hi=validate.MAX_PRIORITY)
        if weight_rule not in WEIGHT_RULES:
            raise EngineError(f"{w}unknown weight_rule {weight_rule!r}; use one of {', '.join(WEIGHT_RULES)}")
        if trigger_rule not in TRIGGER_RULES:
            raise EngineError(f"{w}unknown trigger_rule {trigger_rule!r}; use one of {', '.join(TRIGGER_RULES)}")
        validate.check_int(retries, "retries", w, lo=0, hi=validate.MAX_RETRIES)
        if not isinstance(preemptible, bool):
            raise EngineError(f"{w}preemptible must be True or False (got {preemptible!r})")
        self.preemptible = preemptible  # its running TIs may be stopped for higher-priority work (docs/priority.md)
        self.pool, self.pool_slots, self.queue, self.executor = pool, pool_slots, queue, executor
        self.priority_weight, self.weight_rule, self.trigger_rule = priority_weight, weight_rule, trigger_rule
        self.retries, self.retry_exponential_backoff = retries, bool(retry_exponential_backoff)
        self.retry_delay = _seconds(retry_delay, "retry_delay", w, allow_none=False, allow_zero=True)
        self.max_retry_delay = _seconds(max_retry_delay, "max_retry_delay", w, allow_none=True, allow_zero=True)
        self.execution_timeout = _seconds(execution_timeout, "execution_timeout", w, allow_none=True, allow_zero=False)
        self.max_active_tis_per_dag = _limit(max_active_tis_per_dag, "max_active_tis_per_dag", w)
        self.max_active_tis_per_dagrun = _limit(max_active_tis_per_dagrun, "max_active_tis_per_dagrun", w)
        self.expand_args: dict[str, list] | None = None
        self.map_upstream: str | None = None      # expand(x=other.output): the task mapped over
        self.inputs: list[dict] = []              # [{"name", "upstream", "mapped"}] of .output references
        self.upstream_ids: set[str] = set()
        self.downstream_ids: set[str] = set()
        self._validate_kind()  # subclass arguments, checked before the task joins the DAG
        self.dag: DAG = dag
        dag.add_task(self)
        self._link_outputs()

    @property
    def output(self) -> TaskOutput:
        """This task's result, for a downstream task: op_kwargs={"rows": extract.output} or
        .expand(x=extract.output) (docs/results.md)."""
        return TaskOutput(self)

    def _use_output(self, ref: TaskOutput, name: str, mapped: bool) -> dict:
        """Record that argument `name` takes ref's task's output; that task becomes upstream."""
        up = ref.task
        if up is self:
            raise EngineError(f"{self.where}{name} refers to the task's own output; use another task's .output")
        if getattr(up, "dag", None) is not self.dag:
            raise EngineError(f"{self.where}{name} refers to task '{up.task_id}' of another DAG; "
                              "use the output of a task of the same DAG")
        if not name.isidentifier():
            raise EngineError(f"{self.where}argument {name!r} takes {up.task_id}.output, but it is not a Python "
                              "identifier; use a name like 'rows'")
        self.set_upstream(up)
        self.inputs.append({"name": name, "upstream": up.task_id, "mapped": 1 if mapped else 0})
        return ref.to_json()

    def _link_outputs(self):
        """Arguments of the task's kind that take another task's output (PythonTask.op_kwargs)."""
    def _validate_kind(self):
        pass

    def _check_expand_key(self, key, values):
        pass

    def __repr__(self):
        return f"<{type(self).__name__} {self.dag.dag_id}.{self.task_id}>"

    def _tasks(self, other) -> list[Task]:
        tasks = list(other) if isinstance(other, (list, tuple, set)) else [other]
        for t in tasks:
            if not isinstance(t, Task):
                raise EngineError(f"{self.where}can only depend on tasks, got {t!r}")
            if t.dag is not self.dag:
                raise EngineError(f"{self.where}cannot depend on task '{t.task_id}' of dag '{t.dag.dag_id}'; "
                                  "keep dependencies inside one DAG")
        return tasks

    def set_downstream(self, other):
        for t in self._tasks(other):
            self.downstream_ids.add(t.task_id)
            t.upstream_ids.add(self.task_id)

    def set_upstream(self, other):
        for t in self._tasks(other):
            t.set_downstream(self)

    def __rshift__(self, other):   # a >> b, a >> [b, c]; returns the right side so chains work
        self.set_downstream(other)
        return other

    def __lshift__(self, other):   # a << b
        self.set_upstream(other)
        return other

    def __rrshift__(self, other):  # [a, b] >> c
        self.set_upstream(other)
        return self

    def __rlshift__(self, other):  # [a, b] << c
        self.set_downstream(other)
        return self

    def expand(self, **kwargs):
        """Map the task: n instances (map_index 0..n-1), instance i gets {key: values[i]}."""
        w = self.where
        if self.expand_args is not None or not kwargs:
            raise EngineError(f"{w}call expand() once, with all mapped arguments, e.g. expand(x=[1, 2])")
        refs = [k for k, v in kwargs.items() if isinstance(v, TaskOutput)]
        if refs:
            if len(kwargs) > 1:
                raise EngineError(f"{w}expand({refs[0]}=...output) maps over one upstream result and takes no other "
                                  "argument; put constant arguments in op_kwargs")
            if self.kind != "python":
                raise EngineError(f"{w}only a PythonTask can be mapped over a task's output; use a PythonTask")
            key = refs[0]
            self._check_expand_key(key, [])
            self.expand_args = {key: self._use_output(kwargs[key], key, mapped=True)}
            self.map_upstream = kwargs[key].task.task_id
            return self
        for key, values in kwargs.items():
            if not isinstance(values, (list, tuple)) or not values:
                raise EngineError(f"{w}expand({key}=...) must be a non-empty list, got {values!r}")
            if len(values) > validate.MAX_MAP_LENGTH:
                raise EngineError(f"{w}expand({key}=...) has {len(values)} items; at most {validate.MAX_MAP_LENGTH} are allowed")
            self._check_expand_key(key, values)
            _json(list(values), f"expand({key}=...)", w, EXPAND_DEPTH)
        if len({len(v) for v in kwargs.values()}) > 1:
            sizes = ", ".join(f"{k}={len(v)}" for k, v in kwargs.items())
            raise EngineError(f"{w}expand() lists have different lengths ({sizes}); make them the same length")
        self.expand_args = {k: list(v) for k, v in kwargs.items()}
        return self


def mapped_kwargs(expand: dict | None) -> list[dict] | None:
    """{"x": [1, 2], "y": [3, 4]} -> [{"x": 1, "y": 3}, {"x": 2, "y": 4}] (list index = map_index)."""
    if expand is None:
        return None
    n = len(next(iter(expand.values())))
    return [{k: v[i] for k, v in expand.items()} for i in range(n)]


def _check_env(env, what: str, where: str):
    if env is not None and (not isinstance(env, dict)
                            or not all(isinstance(k, str) and isinstance(x, str) for k, x in env.items())):
        raise EngineError(f"{where}{what} must be a dict of str -> str, got {env!r}")
    for k, x in (env or {}).items():
        if not k or "=" in k or "\x00" in k:
            raise EngineError(f"{where}{what} has a bad variable name {k!r}; use a non-empty name without '=' or NUL")
        validate.check_text(k, f"{what} variable name {k!r}", where)
        validate.check_text(x, f"{what}[{k!r}]", where)


class BashTask(Task):
    kind = "bash"

    def __init__(self, task_id, bash_command, env=None, **common):
        self.bash_command, self.env = bash_command, env
        super().__init__(task_id, **common)

    def _validate_kind(self):
        if not isinstance(self.bash_command, str) or not self.bash_command.strip():
            raise EngineError(f"{self.where}bash_command must be a non-empty string")
        validate.check_text(self.bash_command, "bash_command", self.where)
        _check_env(self.env, "env", self.where)

    def _check_expand_key(self, key, values):
        if key == "bash_command":
            if not all(isinstance(x, str) and x.strip() for x in values):
                raise EngineError(f"{self.where}expand(bash_command=...) must be a list of non-empty strings")
            for x in values:
                validate.check_text(x, "each expand(bash_command=...) item", self.where)
        elif key == "env":
            for x in values:
                _check_env(x, "each expand(env=...) item", self.where)
        else:
            raise EngineError(f"{self.where}BashTask cannot expand {key!r}; only bash_command and env can be expanded")


class PythonTask(Task):
    kind = "python"

    def __init__(self, task_id, python_callable, op_kwargs=None, **common):
        self.python_callable, self.op_kwargs = python_callable, op_kwargs
        super().__init__(task_id, **common)

    def _validate_kind(self):
        fn, w = self.python_callable, self.where
        if callable(fn):  # workers import the reference, so the DB must store "module:function"
            ref = f"{getattr(fn, '__module__', 'module')}:{getattr(fn, '__name__', 'function')}"
            raise EngineError(f"{w}python_callable must be a 'module.path:function' string, "
                              f"not a function object; use python_callable={ref!r}")
        if not isinstance(fn, str) or not _CALLABLE_RE.fullmatch(fn):
            raise EngineError(f"{w}bad python_callable {fn!r}; use 'module.path:function'")
        if self.op_kwargs is not None and not isinstance(self.op_kwargs, dict):
            raise EngineError(f"{w}op_kwargs must be a dict, got {self.op_kwargs!r}")
        plain = {k: v.to_json() if isinstance(v, TaskOutput) else v for k, v in (self.op_kwargs or {}).items()}
        _json(plain if self.op_kwargs is not None else None, "op_kwargs", w, OP_KWARGS_DEPTH)

    def _link_outputs(self):
        """op_kwargs values that are `other.output`: stored as references, other made upstream."""
        if self.op_kwargs:
            self.op_kwargs = {k: self._use_output(v, k, mapped=False) if isinstance(v, TaskOutput) else v
                              for k, v in self.op_kwargs.items()}

    def _check_expand_key(self, key, values):
        if key in (self.op_kwargs or {}):
            raise EngineError(f"{self.where}{key!r} is both in op_kwargs and expand(); keep it in only one")


# ---- validation and serialization ---------------------------------------------------------------
def topological_order(dag: DAG) -> list[str]:
    """Task ids in dependency order, ties broken by task_id; raises EngineError naming a cycle."""
    indeg = {tid: len(t.upstream_ids) for tid, t in dag.tasks.items()}
    ready = [tid for tid, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        tid = heapq.heappop(ready)
        order.append(tid)
        for d in dag.tasks[tid].downstream_ids:
            indeg[d] -= 1
            if indeg[d] == 0:
                heapq.heappush(ready, d)
    if len(order) < len(dag.tasks):
        # Every leftover task has a leftover upstream, so walking upstream must revisit a task.
        done = set(order)
        path, tid = [], min(t for t in dag.tasks if t not in done)
        while tid not in path:
            path.append(tid)
            tid = min(u for u in dag.tasks[tid].upstream_ids if indeg[u] > 0)
        cycle = list(reversed(path[path.index(tid):]))
        k = cycle.index(min(cycle))
        cycle = cycle[k:] + cycle[:k]  # start the message at the smallest task_id
        names = " -> ".join(cycle + [cycle[0]])
        raise EngineError(f"dag '{dag.dag_id}': cycle {names}; remove one of these dependencies")
    return order


def _relatives(dag: DAG, tid: str, attr: str) -> set[str]:
    seen, stack = set(), [tid]
    while stack:
        for r in getattr(dag.tasks[stack.pop()], attr):
            if r not in seen:
                seen.add(r)
                stack.append(r)
    return seen


def effective_weight(task: Task) -> int:
    """Airflow's weight rules: absolute = own; downstream/upstream = own + sum over all descendants/ancestors."""
    if task.weight_rule == "absolute":
        return task.priority_weight
    attr = "downstream_ids" if task.weight_rule == "downstream" else "upstream_ids"
    total = task.priority_weight + sum(task.dag.tasks[r].priority_weight
                                       for r in _relatives(task.dag, task.task_id, attr))
    # As Airflow does, a sum beyond the INTEGER column is clamped, not refused.
    return max(-validate.INT32_MAX, min(validate.INT32_MAX, total))


_TASK_FIELDS = ("task_id", "kind", "bash_command", "env", "python_callable", "op_kwargs", "pool", "pool_slots",
                "priority_weight", "weight_rule", "queue", "executor", "retries", "retry_delay",
                "retry_exponential_backoff", "max_retry_delay", "execution_timeout", "trigger_rule",
                "max_active_tis_per_dag", "max_active_tis_per_dagrun", "preemptible")
_DAG_FIELDS = ("dag_id", "fileloc", "description", "schedule", "timezone", "start_date", "catchup", "max_active_runs",
               "max_active_tasks", "is_paused_upon_creation", "tags")


def serialize_dag(dag: DAG) -> dict:
    """Validate the DAG and return its plain JSON-able form; tasks in topological order."""
    tasks = []
    for tid in topological_order(dag):
        t = dag.tasks[tid]
        tasks.append({**{f: getattr(t, f) for f in _TASK_FIELDS}, "priority_weight": effective_weight(t),
                      "expand": t.expand_args, "map_upstream": t.map_upstream, "inputs": list(t.inputs),
                      "upstream": sorted(t.upstream_ids)})
    return {**{f: getattr(dag, f) for f in _DAG_FIELDS}, "tags": list(dag.tags), "tasks": tasks}
