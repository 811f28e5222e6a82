variable "project_id" {
  description = "Project that owns the topics and subscriptions."
  type        = string
}

variable "command_topic_prefix" {
  description = "Command topic of pool P is this prefix + P (NOETL_COMMAND_TOPIC_PREFIX)."
  type        = string
  default     = "noetl-commands-"
}

variable "events_topic" {
  description = "Topic the outbox mirrors events to (NOETL_EVENTS_TOPIC)."
  type        = string
  default     = "noetl-events"
}

variable "delivery" {
  description = "Push delivery settings shared by every subscription unless a pool overrides them: ack deadline, retry back-off, attempts before the dead-letter topic, retention."
  type = object({
    ack_deadline_seconds       = optional(number, 60)
    minimum_backoff            = optional(string, "10s")
    maximum_backoff            = optional(string, "600s")
    max_delivery_attempts      = optional(number, 10)
    message_retention_duration = optional(string, "604800s")
    dead_letter_retention      = optional(string, "1209600s")
  })
  default = {}

  validation {
    condition     = var.delivery.max_delivery_attempts >= 5 && var.delivery.max_delivery_attempts <= 100
    error_message = "Pub/Sub allows 5..100 delivery attempts before dead-lettering."
  }

  validation {
    condition     = var.delivery.ack_deadline_seconds >= 10 && var.delivery.ack_deadline_seconds <= 600
    error_message = "ack_deadline_seconds is 10..600."
  }
}

variable "pools" {
  description = "Execution pools keyed by name: one command topic each, pushed to the worker endpoint (when one is given) with an OIDC token; per-pool overrides of the delivery settings."
  type = map(object({
    push_endpoint         = optional(string)
    audience              = optional(string)
    ack_deadline_seconds  = optional(number)
    max_delivery_attempts = optional(number)
  }))

  validation {
    condition     = length(var.pools) > 0 && alltrue([for name in keys(var.pools) : can(regex("^[a-z][a-z0-9-]{0,30}$", name))])
    error_message = "At least one pool; pool names match ^[a-z][a-z0-9-]{0,30}$ (NOETL_POOLS)."
  }
}

variable "events_push" {
  description = "Push target of noetl-events (the projector): endpoint, OIDC audience and ack deadline (default: delivery's); null = no projector deployed yet. Delivery is ordered by the ordering key (the execution id)."
  type = object({
    push_endpoint        = string
    audience             = string
    ack_deadline_seconds = optional(number)
  })
  default = null
}

variable "push_service_account_email" {
  description = "Service account whose OIDC token Pub/Sub attaches to every push (it may invoke only the worker and the projector)."
  type        = string
}

variable "kms_key_name" {
  description = "Customer-managed key for the topics; null = Google-managed."
  type        = string
  default     = null
}

variable "labels" {
  description = "Labels of every topic and subscription."
  type        = map(string)
  default     = {}
}

variable "service_agent_member" {
  description = "The project's Pub/Sub service agent as an IAM member (serviceAccount:service-<number>@gcp-sa-pubsub.iam.gserviceaccount.com), from google_project_service_identity so that it exists before the dead-letter grants name it."
  type        = string

  validation {
    condition     = can(regex("^serviceAccount:service-[0-9]+@gcp-sa-pubsub\\.iam\\.gserviceaccount\\.com$", var.service_agent_member))
    error_message = "service_agent_member is serviceAccount:service-<project number>@gcp-sa-pubsub.iam.gserviceaccount.com."
  }
}
