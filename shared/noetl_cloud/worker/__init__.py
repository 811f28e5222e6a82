"""The worker role (docs/distributed.md): claims a command, runs its step pipeline or loop iteration with the
engine and the tools, and reports the outcome to the control plane.

:func:`~noetl_cloud.worker.run.run_command` is the pure core; :class:`~noetl_cloud.worker.service.WorkerService`
adds the control-plane calls (claim, heartbeats, report, child executions); ``worker.app`` is the push endpoint.
"""
