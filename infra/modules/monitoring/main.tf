# The alert policies a team running the stack expects (docs/deploy.md, "Alerts"): Pub/Sub dead
# letters waiting, a service answering 5xx, spool items dead-lettered by the drainer, the Cloud SQL
# instance near max_connections, a subscription runtime with no instance. Each notifies
# var.notification_channels (none: incidents in the console only).

locals {
  # Monitoring filters take a string list as one_of("a", "b").
  dead_letters = join(", ", [for s in var.dead_letter_subscriptions : jsonencode(s)])
  runtimes     = join(", ", [for s in var.runtime_services : jsonencode(s)])
  services     = "resource.type = \"cloud_run_revision\" AND resource.labels.service_name = starts_with(\"${var.name_prefix}-\")"
  requests     = "${local.services} AND metric.type = \"run.googleapis.com/request_count\""
  threshold    = "${var.thresholds.duration_seconds}s"
  # The instance's connection ceiling the alert fires at (the connection budget: modules/sizing).
  max_backends = floor(var.cloudsql.max_connections * var.thresholds.connection_ratio)
}

resource "google_monitoring_alert_policy" "dead_letter_backlog" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: Pub/Sub dead letters waiting"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "undelivered messages on a dead-letter subscription"
    condition_threshold {
      filter          = "resource.type = \"pubsub_subscription\" AND metric.type = \"pubsub.googleapis.com/subscription/num_undelivered_messages\" AND resource.labels.subscription_id = one_of(${local.dead_letters})"
      comparison      = "COMPARISON_GT"
      threshold_value = var.thresholds.dead_letter_messages
      duration        = "60s"
      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A command or event push failed every delivery attempt and sits on its dead-letter subscription (the subscription id is in the incident). Find the cause in the worker's or projector's logs, then follow docs/deploy.md, \"Alerts\"."
  }
}

resource "google_monitoring_alert_policy" "http_5xx_rate" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: 5xx answers"
  combiner              = "OR"
  severity              = "ERROR"
  notification_channels = var.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "share of a service's requests answered 5xx"
    condition_threshold {
      filter             = "${local.requests} AND metric.labels.response_code_class = \"5xx\""
      denominator_filter = local.requests
      comparison         = "COMPARISON_GT"
      threshold_value    = var.thresholds.error_ratio
      duration           = local.threshold
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
      denominator_aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_RATE"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A service of the stack answers 5xx (every API error is a JSON body with a stable code: the service's request logs say which). Pub/Sub redelivers pushes answered 5xx; see docs/deploy.md, \"Alerts\"."
  }
}

resource "google_monitoring_alert_policy" "spool_dead_letters" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: spool items dead-lettered"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "the drainer dead-lettered a spooled delivery"
    condition_matched_log {
      # The drainer's log line (noetl_cloud.spool.drain): one per item moved to the dead-letter prefix.
      filter = "${local.services} AND jsonPayload.message = \"spool item dead-lettered\""
      label_extractors = {
        subscription = "EXTRACT(jsonPayload.subscription)"
        reason       = "EXTRACT(jsonPayload.reason)"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
    notification_rate_limit {
      period = "300s"
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A spooled delivery was dead-lettered (poison, or older than its subscription's max_age_hours). List it with `noetl-cloud spool dlq <subscription>` and resend it with `noetl-cloud spool resend` (docs/spool.md)."
  }
}

resource "google_monitoring_alert_policy" "cloudsql_connections" {
  project               = var.project_id
  display_name          = "${var.name_prefix}: Cloud SQL connections near max_connections"
  combiner              = "OR"
  severity              = "WARNING"
  notification_channels = var.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "backends above ${var.thresholds.connection_ratio * 100}% of max_connections"
    condition_threshold {
      filter          = "resource.type = \"cloudsql_database\" AND metric.type = \"cloudsql.googleapis.com/database/postgresql/num_backends\" AND resource.labels.database_id = \"${var.cloudsql.database_id}\""
      comparison      = "COMPARISON_GT"
      threshold_value = local.max_backends
      duration        = local.threshold
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MEAN"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.database_id"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "The instance holds more connections than the budget of modules/sizing allows for: pools x max instances x roles. Lower max_instances or db_pool_size, or raise max_connections with a larger tier (docs/deploy.md, \"Sizing\")."
  }
}

# A subscription runtime keeps min_instances >= 1 with CPU always on (modules/stack): no instance for
# a while means nothing pulls its subscription. Its liveness probe restarts a stuck loop; this fires
# when no instance comes back.
resource "google_monitoring_alert_policy" "runtime_liveness" {
  count = length(var.runtime_services) > 0 ? 1 : 0

  project               = var.project_id
  display_name          = "${var.name_prefix}: subscription runtime not running"
  combiner              = "OR"
  severity              = "CRITICAL"
  notification_channels = var.notification_channels
  user_labels           = var.labels

  conditions {
    display_name = "no instance metrics from a runtime"
    condition_absent {
      filter   = "resource.type = \"cloud_run_revision\" AND metric.type = \"run.googleapis.com/container/instance_count\" AND resource.labels.service_name = one_of(${local.runtimes})"
      duration = "${var.thresholds.runtime_silent_seconds}s"
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }

  conditions {
    display_name = "a runtime with fewer than one instance"
    condition_threshold {
      filter          = "resource.type = \"cloud_run_revision\" AND metric.type = \"run.googleapis.com/container/instance_count\" AND resource.labels.service_name = one_of(${local.runtimes})"
      comparison      = "COMPARISON_LT"
      threshold_value = 1
      duration        = local.threshold
      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_MAX"
        cross_series_reducer = "REDUCE_SUM"
        group_by_fields      = ["resource.label.service_name"]
      }
    }
  }

  documentation {
    mime_type = "text/markdown"
    content   = "A subscription runtime has no running instance: its subscription's messages wait (Pub/Sub keeps them for the retention period). Read the service's logs and `GET /status` of a new instance; see docs/runtime.md."
  }
}
