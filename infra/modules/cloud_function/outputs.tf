output "name" {
  description = "Function name (and the name of the Cloud Run service it runs as)."
  value       = google_cloudfunctions2_function.this.name
}

output "uri" {
  description = "The function's own HTTPS URL as the API reports it (the stack configures callers with the deterministic run.app URL of the same service)."
  value       = google_cloudfunctions2_function.this.service_config[0].uri
}
