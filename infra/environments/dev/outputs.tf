output "service_urls" {
  description = "URL of each role's service."
  value       = module.noetl.service_urls
}

output "ingress_url" {
  description = "Public base URL of the push ingress."
  value       = module.noetl.ingress_url
}

output "execute_url" {
  description = "Base URL of the control plane's API (the operator's calls of docs/deploy.md, step 6)."
  value       = module.noetl.execute_url
}

output "service_accounts" {
  description = "Service account of each role and of the push, scheduler, migration and deployer identities."
  value       = module.noetl.service_accounts
}

output "image_repository" {
  description = "Artifact Registry path the image is pushed to."
  value       = module.noetl.image_repository
}

output "build_source_staging_dir" {
  description = "The --gcs-source-staging-dir of gcloud builds submit."
  value       = module.noetl.build_source_staging_dir
}

output "cloudbuild_substitutions" {
  description = "The --substitutions of gcloud builds submit."
  value       = module.noetl.cloudbuild_substitutions
}

output "cloudsql_connection_name" {
  description = "NOETL_CLOUDSQL_INSTANCE."
  value       = module.noetl.cloudsql_connection_name
}

output "sizing" {
  description = "Threads, ack and attempt deadlines and the Cloud SQL connection budget derived from the roles map (docs/deploy.md, Sizing)."
  value       = module.noetl.sizing
}

output "alert_policies" {
  description = "Resource name of each alert policy."
  value       = module.noetl.alert_policies
}

output "build_trigger" {
  description = "The Cloud Build trigger's id and location (null without build_trigger)."
  value       = module.noetl.build_trigger
}
