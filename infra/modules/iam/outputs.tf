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
  description = "IAM members granted run.invoker on each role's services: the callers of the role, the scheduler on the services its jobs call, the push identity only on worker and projector, the operators on execute and projector, the deployer on projector (its post-rollout smoke test)."
  value = {
    for r in var.roles : r => toset(concat(
      local.callers[r],
      r == "projector" ? ["serviceAccount:${google_service_account.deployer.email}"] : [],
    ))
  }
}

output "api_callers" {
  description = "Emails whose Google ID tokens each role's internal API accepts (its NOETL_INTERNAL_API_CALLERS), for execute, frames, projector and spool_drainer."
  value       = local.api_callers
}
