output "jobs" {
  description = "Job id of each job."
  value       = { for name, j in google_cloud_scheduler_job.this : name => j.id }
}
