output "role_emails" {
  description = "Service account email of each role."
  value       = { for r, sa in google_service_account.role : r => sa.email }
}

output "push_email" {
  description = "Service account of the Pub/Sub push OIDC tokens."
  value       = google_service_account.push.email
}

output "scheduler_email" {
  description = "Service account of the Cloud Scheduler OIDC tokens."
  value       = google_service_account.scheduler.email
}

output "migrate_email" {
  description = "Service account of the migration job (owner of the schema)."
  value       = google_service_account.migrate.email
}

output "deployer_email" {
  description = "Service account to run Cloud Build with (gcloud builds submit --service-account)."
  value       = google_service_account.deployer.email
}

output "cloudsql_accounts" {
  description = "Emails that are IAM database users: the control-plane roles and the migration job."
  value       = [for m in values(local.cloudsql_members) : trimprefix(m, "serviceAccount:")]
}

output "invokers" {
  description = "IAM members granted run.invoker on each role's service: the callers of the role, the scheduler on the services its jobs call, the push identity only on worker and projector."
  value = {
    for r in var.roles : r => toset(concat(
      local.invokers[r],
      contains(local.scheduler_targets, r) ? [local.sched_member] : [],
    ))
  }
}

output "execute_callers" {
  description = "Emails allowed to call the internal API (NOETL_INTERNAL_API_CALLERS)."
  value = concat(
    [for r in setintersection(var.roles, ["ingress", "worker", "spool_drainer", "subscription_runtime"]) : google_service_account.role[r].email],
    [google_service_account.scheduler.email],
  )
}
