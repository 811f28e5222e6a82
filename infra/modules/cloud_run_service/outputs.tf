output "name" {
  description = "Service name."
  value       = google_cloud_run_v2_service.this.name
}

output "uri" {
  description = "The service URL Cloud Run assigned."
  value       = google_cloud_run_v2_service.this.uri
}

output "service_account_email" {
  description = "Identity of the service."
  value       = var.service_account_email
}
