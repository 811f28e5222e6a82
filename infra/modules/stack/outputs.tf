output "service_urls" {
  description = "URL of each service (the deterministic run.app form the roles are configured with), keyed by role, worker-<pool> and subscription_runtime-<name>."
  value       = local.service_url
}

output "ingress_url" {
  description = "Public base URL of the push ingress (POST /ingress/<listener>)."
  value       = try(local.url["ingress"], null)
}

output "execute_url" {
  description = "Base URL of the control-plane API (NOETL_API_URL, NOETL_INTERNAL_API_AUDIENCE)."
  value       = local.url["execute"]
}

output "service_names" {
  description = "Cloud Run service name of each service, keyed as service_urls (a role deployed as a function runs as the Cloud Run service of the function's name)."
  value       = { for k, svc in local.services : k => svc.name }
}

output "service_accounts" {
  description = "Service account of each role, plus the push, scheduler, migration and deployer identities."
  value = merge(module.iam.role_emails, {
    pubsub_push = module.iam.push_email
    scheduler   = module.iam.scheduler_email
    migrate     = module.iam.migrate_email
    deployer    = module.iam.deployer_email
  })
}

output "image_repository" {
  description = "Artifact Registry path images are pushed to (<region>-docker.pkg.dev/<project>/<repository>)."
  value       = "${google_artifact_registry_repository.images.location}-docker.pkg.dev/${var.project_id}/${google_artifact_registry_repository.images.repository_id}"
}

output "cloudsql_connection_name" {
  description = "NOETL_CLOUDSQL_INSTANCE of the control plane."
  value       = module.cloudsql.connection_name
}

output "migrate_job" {
  description = "Cloud Run job that runs noetl-cloud db upgrade."
  value       = google_cloud_run_v2_job.migrate.name
}

output "buckets" {
  description = "Spool, payload and build-source bucket names."
  value       = { spool = module.spool_bucket.name, payloads = module.payload_bucket.name, archive = module.archive_bucket.name, build_source = module.build_source_bucket.name }
}

output "topics" {
  description = "Command topic of each pool and the events topic."
  value       = { commands = { for p, t in module.pubsub.command_topics : p => t.name }, events = module.pubsub.events_topic.name }
}

output "build_source_staging_dir" {
  description = "The --gcs-source-staging-dir of gcloud builds submit: the bucket the deployer may read."
  value       = "gs://${module.build_source_bucket.name}/source"
}

output "cloudbuild_substitutions" {
  description = "The --substitutions of gcloud builds submit for this stack."
  value       = "_REGION=${var.region},_REPOSITORY=${google_artifact_registry_repository.images.repository_id},_NAME_PREFIX=${var.name_prefix}"
}

output "sizing" {
  description = "The derived sizing (modules/sizing): gunicorn threads per role, push ack deadlines, scheduler attempt deadlines and the database connection budget against max_connections."
  value = {
    gunicorn_threads                   = module.sizing.gunicorn_threads
    push_ack_deadline_seconds          = module.sizing.push_ack_deadline_seconds
    scheduler_attempt_deadline_seconds = module.sizing.scheduler_attempt_deadline_seconds
    db_connections                     = module.sizing.db_connections
  }
}

output "alert_policies" {
  description = "Resource name of each alert policy (modules/monitoring)."
  value       = module.monitoring.alert_policies
}

output "build_trigger" {
  description = "The Cloud Build trigger's id and location (null without var.build_trigger)."
  value       = try({ id = module.build_trigger[0].id, location = module.build_trigger[0].location }, null)
}

output "functions" {
  description = "The roles deployed as 2nd-gen Cloud Functions: function name, keyed as service_urls (their URL is the service_urls one)."
  value       = { for k, f in module.function : k => f.name }
}
