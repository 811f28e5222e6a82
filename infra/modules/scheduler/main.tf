resource "google_cloud_scheduler_job" "this" {
  for_each = var.jobs

  project          = var.project_id
  region           = var.region
  name             = each.key
  description      = each.value.description
  schedule         = each.value.schedule
  time_zone        = each.value.time_zone
  attempt_deadline = each.value.attempt_deadline
  paused           = each.value.paused

  retry_config {
    retry_count = each.value.retry_count
  }

  http_target {
    uri         = each.value.uri
    http_method = each.value.http_method
    headers     = each.value.body == null ? {} : { "Content-Type" = "application/json" }
    body        = each.value.body == null ? null : base64encode(each.value.body)

    oidc_token {
      service_account_email = var.service_account_email
      audience              = each.value.audience
    }
  }
}
