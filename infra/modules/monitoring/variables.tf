variable "project_id" {
  description = "Project the alert policies watch (and are created in)."
  type        = string
}

variable "name_prefix" {
  description = "The stack's name prefix: every Cloud Run service and function of the stack starts with it."
  type        = string
}

variable "notification_channels" {
  description = "Cloud Monitoring notification channel ids (projects/<p>/notificationChannels/<n>) every policy notifies; empty = the policies open incidents in the console only."
  type        = list(string)
  default     = []
}

variable "dead_letter_subscriptions" {
  description = "Names of the Pub/Sub dead-letter subscriptions of the command and events topics (modules/pubsub), known at plan."
  type        = list(string)
}

variable "cloudsql" {
  description = "The Cloud SQL instance the connection alert watches: project:instance database id and its max_connections."
  type = object({
    database_id     = string
    max_connections = number
  })
}

variable "runtime_services" {
  description = "Cloud Run service names of the subscription runtimes (one per held subscription; each keeps min_instances >= 1)."
  type        = list(string)
  default     = []
}

variable "thresholds" {
  description = "When each policy fires: dead-letter backlog (messages above which it fires), 5xx share of a service's requests, Cloud SQL connections as a share of max_connections, and how long a condition must hold / a runtime may be silent."
  type = object({
    dead_letter_messages   = optional(number, 0)
    error_ratio            = optional(number, 0.05)
    connection_ratio       = optional(number, 0.8)
    duration_seconds       = optional(number, 300)
    runtime_silent_seconds = optional(number, 600)
  })
  default = {}

  validation {
    condition     = var.thresholds.error_ratio > 0 && var.thresholds.error_ratio < 1 && var.thresholds.connection_ratio > 0 && var.thresholds.connection_ratio <= 1
    error_message = "error_ratio must be in (0, 1) and connection_ratio in (0, 1]."
  }
}

variable "labels" {
  description = "User labels of every policy."
  type        = map(string)
  default     = {}
}
