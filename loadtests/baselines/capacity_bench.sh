# Issue 11 before/after: V=4 (before) or V=5 (after, PostgreSQL lines only: MariaDB v5 calls v4) bash loadtests/baselines/capacity_bench.sh
cd "$(dirname "$0")/../.."
PG=postgresql+psycopg://postgres@127.0.0.1:5432/capacity_bench
MY=mysql+pymysql://root@127.0.0.1:3306/capacity_bench
V=${V:-4}
P=${P:-.venv/bin/python}
$P loadtests/bench_queue.py --database-url $PG --version $V --workloads small,blocked --blocked 5000 --latency-calls 20 --out /tmp/pg_a_v$V.json
$P loadtests/bench_queue.py --database-url $PG --version $V --workloads blocked --blocked 500000 --latency-calls 10 --out /tmp/pg_b_v$V.json
$P loadtests/bench_queue.py --database-url $PG --version $V --workloads sizes --sizes 100000 --latency-calls 20 --drain-seconds 15 --out /tmp/pg_c_v$V.json
$P loadtests/bench_queue.py --database-url $MY --version $V --workloads small,blocked --blocked 5000 --latency-calls 20 --out /tmp/my_a_v$V.json
$P loadtests/bench_queue.py --database-url $MY --version $V --workloads sizes --sizes 100000 --latency-calls 10 --drain-seconds 15 --out /tmp/my_c_v$V.json
$P loadtests/bench_queue.py --database-url $MY --version $V --workloads blocked --blocked 500000 --latency-calls 3 --out /tmp/my_b_v$V.json
