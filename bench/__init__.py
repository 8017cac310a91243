"""toolgate's benchmark harness (issue F): ``python -m bench [--quick] [--rounds N] [--out FILE]``.

Servers run in child processes (``bench.server``), the load generator in the parent, so
client and server never share a GIL, and the bare grpc.aio echo baseline has exactly the
same process layout and payload as the gateway. Every figure is a median over rounds and
every budget is a ratio or a difference against the baseline measured in the same run.

Modules: ``procstat`` (CPU and RSS of a process tree from /proc), ``server`` (the child
process, with ``--workers``), ``procs`` (starting and stopping the children, OPA included),
``scenarios`` (configs and requests), ``load`` (closed-loop load, channels, head-of-line),
``paced`` (open-loop load), ``grants`` (grants made through the Approvals service for the
grant scenario), ``micro`` (in-process micro-figures), ``report`` (budgets and the table),
``__main__``.
"""
