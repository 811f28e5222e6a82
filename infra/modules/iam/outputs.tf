output "role_emails" {
  description = "Service account email of each role."
  value       = { for r in var.roles : r => local.emails[r] }
  # Known at plan (built from the account ids); a reader of it is applied after the accounts exist.
  depends_on = [google_service_account.role]
}

output "push_email" {
  description = "Service account of the Pub/Sub push OIDC tokens."
  value       = local.emails.push
  depends_on  = [google_service_account.push]
}

output "scheduler_email" {
  description = "Service account of the Cloud Scheduler OIDC tokens."
  value       = local.emails.scheduler
  depends_on  = [google_service_account.scheduler]
}

output "migrate_email" {
  description = "Service account of the migration job (owner of the schema)."
  value       = local.emails.migrate
  depends_on  = [google_service_account.migrate]
}

output "deployer_email" {
  description = "Service account to run Cloud Build with (gcloud builds submit --service-account)."
  value       = local.emails.deployer
  depends_on  = [google_service_account.deployer]
}

output "cloudsql_accounts" {
  description = "Emails that are IAM database users, keyed by role: the control-plane roles and the migration job (migrate)."
  value       = { for k, m in local.cloudsql_members : k => trimprefix(m, "serviceAccount:") }
  depends_on  = [google_service_account.role, google_service_account.migrate]
}

output "invokers" {
  description = "IAM members granted run.invoker on each role's services: the members of its caller roles (local.service_callers): the scheduler on the services its jobs call, the push identity only on worker and projector, the operators on execute, projector and spool_drainer, the deployer on execute (its post-rollout smoke test)."
  value = {
    for r in var.roles : r => toset(local.callers[r])
  }
  depends_on = [google_service_account.role, google_service_account.push, google_service_account.scheduler, google_service_account.deployer]
}

output "api_callers" {
  description = "The <role>=<email> entries of the callers whose Google ID tokens each role's internal API accepts, each mapped to its caller role (its NOETL_INTERNAL_API_CALLERS), for execute, frames, projector and spool_drainer."
  value       = local.api_callers
}
