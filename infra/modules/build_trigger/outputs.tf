output "id" {
  description = "The trigger's id (gcloud builds triggers run <id> --region <location> --branch <branch>)."
  value       = google_cloudbuild_trigger.deploy.trigger_id
}

output "location" {
  description = "Where the trigger lives: the region for a 2nd-gen repository, global for the GitHub app."
  value       = google_cloudbuild_trigger.deploy.location
}
