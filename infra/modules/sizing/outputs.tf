output "gunicorn_threads" {
  description = "GUNICORN_THREADS of each HTTP role: its Cloud Run concurrency."
  value       = local.gunicorn_threads
}

output "push_ack_deadline_seconds" {
  description = "Ack deadline of the push subscriptions to worker (every pool) and projector: the request timeout of that role."
  value       = local.push_ack_deadline_seconds

  precondition {
    condition     = alltrue([for r, d in local.push_ack_deadline_seconds : d >= 10 && d <= local.max_push_ack_deadline])
    error_message = "timeout_seconds of worker and projector must be 10..600: Pub/Sub waits at most 600 s for a push to be answered, and would deliver a longer command again while it still runs."
  }
}

output "scheduler_attempt_deadline_seconds" {
  description = "Attempt deadline of a Cloud Scheduler job calling each role: the role's request timeout, within 15..1800 s."
  value       = local.scheduler_attempt_deadline_seconds
}

output "db_connections" {
  description = "Connections the instance must accept: per control-plane role (max_instances x (db_pool_size + db_max_overflow)), the total with the migration job and the reserve, and max_connections."
  value = {
    by_role         = local.db_connections_by_role
    total           = local.db_connections_total
    max_connections = var.database.max_connections
  }

  precondition {
    condition     = local.db_connections_total <= var.database.max_connections
    error_message = "Control-plane connections exceed the instance: sum(max_instances x (db_pool_size + db_max_overflow)) over execute, frames and projector + migrate + reserved = ${local.db_connections_total} > max_connections ${var.database.max_connections}. Lower max_instances or the pools, or raise cloudsql.max_connections (docs/deploy.md, Sizing)."
  }
}
