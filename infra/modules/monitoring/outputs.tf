output "alert_policies" {
  description = "Resource name of each alert policy, keyed by what it watches."
  value = merge(
    {
      dead_letter_backlog  = google_monitoring_alert_policy.dead_letter_backlog.name
      http_5xx_rate        = google_monitoring_alert_policy.http_5xx_rate.name
      spool_dead_letters   = google_monitoring_alert_policy.spool_dead_letters.name
      cloudsql_connections = google_monitoring_alert_policy.cloudsql_connections.name
    },
    { for p in google_monitoring_alert_policy.runtime_liveness : "runtime_liveness" => p.name },
  )
}
