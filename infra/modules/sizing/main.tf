# Sizing derived from one place (docs/deploy.md, "Sizing"): the stack's roles map and the Cloud SQL
# instance. Every number a service, subscription or job is configured with comes from here, and the
# outputs refuse (at plan) a combination the container or the database cannot serve.

locals {
  # Pub/Sub waits at most 600 s for a push endpoint's answer (the longest ack deadline).
  max_push_ack_deadline = 600
  # Cloud Scheduler waits 15 s .. 30 min for an HTTP target.
  scheduler_deadline_bounds = { min = 15, max = 1800 }

  control_plane = setintersection(toset(keys(var.roles)), ["execute", "frames", "projector"])
  push_targets  = setintersection(toset(keys(var.roles)), ["worker", "projector"])

  # One gunicorn process per instance serves `concurrency` requests at once, a thread each: the
  # number Cloud Run sends an instance is the number it can serve (functions/entrypoint.sh).
  gunicorn_threads = { for r, s in var.roles : r => s.concurrency if r != "subscription_runtime" }

  # A push is acknowledged by the answer, so a command may run as long as the ack deadline before
  # Pub/Sub delivers it again: the deadline is the request timeout of the service it pushes to.
  push_ack_deadline_seconds = { for r in local.push_targets : r => var.roles[r].timeout_seconds }

  # A job's attempt ends when the service's request would: its timeout, within Scheduler's bounds.
  scheduler_attempt_deadline_seconds = {
    for r, s in var.roles : r => min(local.scheduler_deadline_bounds.max, max(local.scheduler_deadline_bounds.min, s.timeout_seconds))
  }

  # Connections to the instance: every control-plane instance at its scaling limit with a full pool,
  # the migration job, and the reserve.
  #   sum over execute, frames, projector of max_instances * (db_pool_size + db_max_overflow)
  #   + migrate_connections + reserved_connections  <=  max_connections
  db_connections_by_role = {
    for r in local.control_plane : r => var.roles[r].max_instances * (var.roles[r].db_pool_size + var.roles[r].db_max_overflow)
  }
  db_connections_total = sum(concat([0], values(local.db_connections_by_role))) + var.database.migrate_connections + var.database.reserved_connections
}
